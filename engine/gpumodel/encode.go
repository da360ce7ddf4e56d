package gpumodel

import (
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
	e := enc{k: s.m.k, cb: cb}
	s.encodeStep(&e, st)
	return e.err()
}

// stepCost is the cost of the decode step st.
func (s *Sequence) stepCost(st step) Cost {
	e := enc{k: s.m.k}
	s.encodeStep(&e, st)
	return e.cost
}

func (s *Sequence) encodeStep(e *enc, st step) {
	m, act := s.m, &s.act
	c := m.cfg
	e.embed(act.x, m.embed, st.token)
	e.barrier()
	for i := range m.layers {
		l, ls := &m.layers[i], &s.layers[i]
		if l.kind == checkpoint.Attention {
			s.attention(e, l, ls, st.pos)
		} else {
			s.deltaNet(e, l, ls)
		}
		e.barrier()
		s.moe(e, l)
		e.barrier()
	}
	if st.logits || st.next.Buf != nil {
		e.rmsNorm(act.xn, act.x, m.finalNorm, c.Hidden, 1, c.RMSNormEps)
		e.barrier()
		e.qmv(act.logits, m.lmHead, act.xn)
		if st.next.Buf != nil {
			e.barrier()
			s.pick(e, st.next)
		}
	}
}

func (s *Sequence) attention(e *enc, l *layer, ls *layerState, pos int) {
	act, a := &s.act, s.m.attn
	s.qmvs(e, []shaders.View{act.qg, act.k, act.v}, []shaders.QMatrix{l.q, l.kp, l.v}, l.inNorm)
	e.barrier()
	io := shaders.AttnPrepIO{
		Q: act.q, Gate: act.gate, QG: act.qg, K: act.k, V: act.v, KCache: ls.kCache, VCache: ls.vCache,
		QNorm: l.qNorm, KNorm: l.kNorm, Shape: a, Pos: pos,
	}
	if s.img.held {
		// Past an image the rotary position is not the cache row.
		s.mropeStep(e, io)
	} else {
		e.attnPrep(io, 1)
	}
	e.barrier()
	e.attnDecode(shaders.AttnDecodeIO{
		AttnIO:  shaders.AttnIO{O: act.o, Q: act.q, Gate: act.gate, KCache: ls.kCache, VCache: ls.vCache, Shape: a},
		Scratch: act.attnScratch, N: pos + 1,
	})
	e.barrier()
	e.qmvAdd(act.x, l.o, act.o)
}

func (s *Sequence) deltaNet(e *enc, l *layer, ls *layerState) {
	act, d := &s.act, s.m.delta
	s.qmvs(e, []shaders.View{act.u, act.z, act.b, act.a}, []shaders.QMatrix{l.qkv, l.z, l.b, l.a}, l.inNorm)
	e.barrier()
	e.deltaStepConv(shaders.DeltaStepConvIO{
		DeltaStepIO: shaders.DeltaStepIO{
			O: act.dOut, QKV: act.u, Z: act.z, B: act.b, A: act.a,
			State: ls.state, NegA: l.negA, DtBias: l.dtBias, Norm: l.gnNorm, Shape: d,
		},
		ConvState: ls.conv, ConvW: l.conv,
	})
	e.barrier()
	e.qmvAdd(act.x, l.out, act.dOut)
	// The step read the conv state; only now may this token shift in.
	e.deltaConvShift(act.u, ls.conv, d.Channels(), d.ConvKernel)
}

// moe runs the MoE block on RMSNorm(act.x) * l.postNorm and adds its
// output to the residual stream act.x.
func (s *Sequence) moe(e *enc, l *layer) {
	act, c := &s.act, s.m.cfg
	norm := shaders.Norm{W: l.postNorm, Eps: c.RMSNormEps}
	s.qmvs(e, []shaders.View{act.routerLogits, act.shGate}, []shaders.QMatrix{l.router, l.shExpertGate}, l.postNorm)
	e.normQMVSwiGLU(shaders.NormQMVSwiGLUIO{Out: act.shH, Gate: l.shGate, Up: l.shUp, X: act.x, Norm: norm})
	e.barrier()
	// The expert SwiGLU routes for itself (no level of its own for the
	// top-k).
	e.routedSwiGLU(shaders.RoutedSwiGLUIO{
		Out: act.eh, Gate: l.gate, Up: l.up, X: act.x, Norm: norm,
		IDs: act.ids, Weights: act.weights, Logits: act.routerLogits, Experts: c.Experts, TopK: c.TopK, NormalizeTopK: c.NormTopK,
	})
	e.barrier()
	e.moeDownCombine(shaders.MoEDownIO{
		X: act.x, Down: l.down, H: act.eh, IDs: act.ids, Weights: act.weights, TopK: c.TopK,
		SharedDown: l.shDown, SharedH: act.shH, SharedGate: act.shGate,
	})
}

// qmvs writes outs[i] = ms[i] · RMSNorm(act.x) * norm in as few dispatches
// as NormQMVMulti allows: matrices of one width and bit width share one,
// up to its limit (a checkpoint may quantize the projections of one input
// differently).
func (s *Sequence) qmvs(e *enc, outs []shaders.View, ms []shaders.QMatrix, norm shaders.View) {
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
		e.normQMVMulti(shaders.NormQMVMultiIO{
			Outs: o, Ms: g, X: s.act.x, Norm: shaders.Norm{W: norm, Eps: s.m.cfg.RMSNormEps},
		})
	}
}
