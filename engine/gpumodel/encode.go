package gpumodel

import (
	"errors"

	"petal/engine/checkpoint"
	"petal/gpu"
	"petal/shaders"
)

// step encodes one decode step for the token at position pos, read on the
// GPU from token. With logits it computes the lm_head product into the
// logits buffer; with next set (a buffer) it also writes the argmax there.
type step struct {
	pos    int
	token  shaders.View
	logits bool
	next   shaders.View
}

// encodeOps records one step into cb through the ops. Barriers sit only
// between dependent ops; the ops listed together between two barriers read
// only what earlier levels wrote.
func (s *Sequence) encodeOps(cb gpu.CommandBuffer, st step) error {
	m, k, act := s.m, s.m.k, &s.act
	c := m.cfg
	var errs []error
	do := func(err error) { errs = append(errs, err) }

	do(k.Embed(cb, act.x, m.embed, st.token))
	cb.Barrier()
	do(k.RMSNorm(cb, act.xn, act.x, m.layers[0].inNorm, c.Hidden, 1, c.RMSNormEps))
	cb.Barrier()
	for i := range m.layers {
		l, ls := &m.layers[i], &s.layers[i]
		if l.kind == checkpoint.Attention {
			do(s.attention(cb, l, ls, st.pos))
		} else {
			do(s.deltaNet(cb, l, ls))
		}
		cb.Barrier()
		do(k.AddRMSNorm(cb, act.x, act.delta, act.xn, l.postNorm, c.Hidden, c.RMSNormEps))
		cb.Barrier()
		next := m.finalNorm
		if i+1 < len(m.layers) {
			next = m.layers[i+1].inNorm
		}
		do(s.moe(cb, l, next))
		cb.Barrier()
	}
	if st.logits || st.next.Buf != nil {
		do(k.QMV(cb, act.logits, m.lmHead, act.xn))
		if st.next.Buf != nil {
			cb.Barrier()
			do(s.pick(cb, st.next))
		}
	}
	return errors.Join(errs...)
}

func (s *Sequence) attention(cb gpu.CommandBuffer, l *layer, ls *layerState, pos int) error {
	k, act, a := s.m.k, &s.act, s.m.attn
	var errs []error
	do := func(err error) { errs = append(errs, err) }
	do(s.qmvs(cb, []shaders.View{act.qg, act.k, act.v}, []shaders.QMatrix{l.q, l.kp, l.v}, act.xn))
	cb.Barrier()
	do(k.AttnPrep(cb, act.q, act.gate, act.qg, act.k, act.v, ls.kCache, ls.vCache, l.qNorm, l.kNorm, a, pos))
	cb.Barrier()
	do(k.AttnDecode(cb, act.o, act.q, act.gate, ls.kCache, ls.vCache, act.attnScratch, a, pos+1))
	cb.Barrier()
	do(k.QMV(cb, act.delta, l.o, act.o))
	return errors.Join(errs...)
}

func (s *Sequence) deltaNet(cb gpu.CommandBuffer, l *layer, ls *layerState) error {
	k, act, d := s.m.k, &s.act, s.m.delta
	var errs []error
	do := func(err error) { errs = append(errs, err) }
	do(s.qmvs(cb, []shaders.View{act.u, act.z, act.b, act.a}, []shaders.QMatrix{l.qkv, l.z, l.b, l.a}, act.xn))
	cb.Barrier()
	do(k.DeltaConv(cb, act.convOut, act.u, ls.conv, l.conv, d.Channels(), d.ConvKernel))
	cb.Barrier()
	do(k.DeltaStep(cb, act.dOut, act.convOut, act.z, act.b, act.a, ls.state, l.negA, l.dtBias, l.gnNorm, d))
	cb.Barrier()
	do(k.QMV(cb, act.delta, l.out, act.dOut))
	return errors.Join(errs...)
}

// moe runs the MoE block on act.xn, adds its output to the residual
// stream act.x, and leaves RMSNorm(x) * next in act.xn for what follows.
func (s *Sequence) moe(cb gpu.CommandBuffer, l *layer, next shaders.View) error {
	k, act, c := s.m.k, &s.act, s.m.cfg
	var errs []error
	do := func(err error) { errs = append(errs, err) }
	do(s.qmvs(cb, []shaders.View{act.routerLogits, act.shGate}, []shaders.QMatrix{l.router, l.shExpertGate}, act.xn))
	do(k.QMVSwiGLU(cb, act.shH, l.shGate, l.shUp, act.xn))
	cb.Barrier()
	// The expert SwiGLU routes for itself (no level of its own for the
	// top-k), beside the shared expert's down projection.
	do(k.QMVExpertsSwiGLURouted(cb, act.eh, l.gate, l.up, act.xn, act.ids, act.weights, act.routerLogits, c.Experts, c.TopK, c.NormTopK))
	do(k.QMV(cb, act.shOut, l.shDown, act.shH))
	cb.Barrier()
	do(k.QMVExperts(cb, act.ys, l.down, act.eh, c.ExpertIntermediate, act.ids, c.TopK))
	cb.Barrier()
	do(k.MoECombineAddRMSNorm(cb, act.x, act.ys, act.weights, act.shOut, act.shGate, act.xn, next, c.Hidden, c.TopK, c.RMSNormEps))
	return errors.Join(errs...)
}

// qmvs writes outs[i] = ms[i] · x in as few dispatches as QMVMulti allows:
// matrices of one width and bit width share one, up to its limit (a
// checkpoint may quantize the projections of one input differently).
func (s *Sequence) qmvs(cb gpu.CommandBuffer, outs []shaders.View, ms []shaders.QMatrix, x shaders.View) error {
	var errs []error
	done := make([]bool, len(ms))
	for i := range ms {
		if done[i] {
			continue
		}
		var o []shaders.View
		var g []shaders.QMatrix
		for j := i; j < len(ms) && len(g) < shaders.QMVMultiMax; j++ {
			if !done[j] && ms[j].Cols == ms[i].Cols && ms[j].Bits == ms[i].Bits {
				done[j] = true
				o, g = append(o, outs[j]), append(g, ms[j])
			}
		}
		errs = append(errs, s.m.k.QMVMulti(cb, o, g, x))
	}
	return errors.Join(errs...)
}
