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
// only what earlier levels wrote. The residual stream act.x is the only
// vector between blocks: the norms before a block's products are folded
// into them, the residual adds into the products that end a block.
func (s *Sequence) encodeOps(cb gpu.CommandBuffer, st step) error {
	m, k, act := s.m, s.m.k, &s.act
	c := m.cfg
	var errs []error
	do := func(err error) { errs = append(errs, err) }

	do(k.Embed(cb, act.x, m.embed, st.token))
	cb.Barrier()
	for i := range m.layers {
		l, ls := &m.layers[i], &s.layers[i]
		if l.kind == checkpoint.Attention {
			do(s.attention(cb, l, ls, st.pos))
		} else {
			do(s.deltaNet(cb, l, ls))
		}
		cb.Barrier()
		do(s.moe(cb, l))
		cb.Barrier()
	}
	if st.logits || st.next.Buf != nil {
		do(k.RMSNorm(cb, act.xn, act.x, m.finalNorm, c.Hidden, 1, c.RMSNormEps))
		cb.Barrier()
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
	do(s.qmvs(cb, []shaders.View{act.qg, act.k, act.v}, []shaders.QMatrix{l.q, l.kp, l.v}, l.inNorm))
	cb.Barrier()
	do(k.AttnPrep(cb, shaders.AttnPrepIO{
		Q: act.q, Gate: act.gate, QG: act.qg, K: act.k, V: act.v, KCache: ls.kCache, VCache: ls.vCache,
		QNorm: l.qNorm, KNorm: l.kNorm, Shape: a, Pos: pos,
	}))
	cb.Barrier()
	do(k.AttnDecode(cb, shaders.AttnDecodeIO{
		AttnIO:  shaders.AttnIO{O: act.o, Q: act.q, Gate: act.gate, KCache: ls.kCache, VCache: ls.vCache, Shape: a},
		Scratch: act.attnScratch, N: pos + 1,
	}))
	cb.Barrier()
	do(k.QMVAdd(cb, act.x, l.o, act.o))
	return errors.Join(errs...)
}

func (s *Sequence) deltaNet(cb gpu.CommandBuffer, l *layer, ls *layerState) error {
	k, act, d := s.m.k, &s.act, s.m.delta
	var errs []error
	do := func(err error) { errs = append(errs, err) }
	do(s.qmvs(cb, []shaders.View{act.u, act.z, act.b, act.a}, []shaders.QMatrix{l.qkv, l.z, l.b, l.a}, l.inNorm))
	cb.Barrier()
	do(k.DeltaStepConv(cb, shaders.DeltaStepConvIO{
		DeltaStepIO: shaders.DeltaStepIO{
			O: act.dOut, QKV: act.u, Z: act.z, B: act.b, A: act.a,
			State: ls.state, NegA: l.negA, DtBias: l.dtBias, Norm: l.gnNorm, Shape: d,
		},
		ConvState: ls.conv, ConvW: l.conv,
	}))
	cb.Barrier()
	do(k.QMVAdd(cb, act.x, l.out, act.dOut))
	// The step read the conv state; only now may this token shift in.
	do(k.DeltaConvShift(cb, act.u, ls.conv, d.Channels(), d.ConvKernel))
	return errors.Join(errs...)
}

// moe runs the MoE block on RMSNorm(act.x) * l.postNorm and adds its
// output to the residual stream act.x.
func (s *Sequence) moe(cb gpu.CommandBuffer, l *layer) error {
	k, act, c := s.m.k, &s.act, s.m.cfg
	norm := shaders.Norm{W: l.postNorm, Eps: c.RMSNormEps}
	var errs []error
	do := func(err error) { errs = append(errs, err) }
	do(s.qmvs(cb, []shaders.View{act.routerLogits, act.shGate}, []shaders.QMatrix{l.router, l.shExpertGate}, l.postNorm))
	do(k.NormQMVSwiGLU(cb, shaders.NormQMVSwiGLUIO{Out: act.shH, Gate: l.shGate, Up: l.shUp, X: act.x, Norm: norm}))
	cb.Barrier()
	// The expert SwiGLU routes for itself (no level of its own for the
	// top-k).
	do(k.NormQMVExpertsSwiGLURouted(cb, shaders.RoutedSwiGLUIO{
		Out: act.eh, Gate: l.gate, Up: l.up, X: act.x, Norm: norm,
		IDs: act.ids, Weights: act.weights, Logits: act.routerLogits, Experts: c.Experts, TopK: c.TopK, NormalizeTopK: c.NormTopK,
	}))
	cb.Barrier()
	do(k.MoEDownCombine(cb, shaders.MoEDownIO{
		X: act.x, Down: l.down, H: act.eh, IDs: act.ids, Weights: act.weights, TopK: c.TopK,
		SharedDown: l.shDown, SharedH: act.shH, SharedGate: act.shGate,
	}))
	return errors.Join(errs...)
}

// qmvs writes outs[i] = ms[i] · RMSNorm(act.x) * norm in as few dispatches
// as NormQMVMulti allows: matrices of one width and bit width share one,
// up to its limit (a checkpoint may quantize the projections of one input
// differently).
func (s *Sequence) qmvs(cb gpu.CommandBuffer, outs []shaders.View, ms []shaders.QMatrix, norm shaders.View) error {
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
		errs = append(errs, s.m.k.NormQMVMulti(cb, shaders.NormQMVMultiIO{
			Outs: o, Ms: g, X: s.act.x, Norm: shaders.Norm{W: norm, Eps: s.m.cfg.RMSNormEps},
		}))
	}
	return errors.Join(errs...)
}
