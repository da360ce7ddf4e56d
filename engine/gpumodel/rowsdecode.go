package gpumodel

import "petal/shaders"

// The ops of a pass of decode rows alone (pass.vec): every product reads
// its weights once for all the rows (shaders.QMVRows), and the MoE block
// routes each row's experts without the grouped GEMM's counting sort.

// qmvRows is m times the first tokens rows of x: the weights once, every
// row's activations.
func (e *enc) qmvRows(out shaders.View, m shaders.QMatrix, x shaders.View, tokens int) {
	if e.add(matmul(m, tokens)) {
		e.check(e.k.QMVRows(e.cb, out, m, x, tokens))
	}
}

func (e *enc) qmvRowsSwiGLU(out shaders.View, gate, up shaders.QMatrix, x shaders.View, tokens int) {
	if e.add(matmul(gate, tokens).Plus(matmul(up, tokens))) {
		e.check(e.k.QMVRowsSwiGLU(e.cb, out, gate, up, x, tokens))
	}
}

// rowsExperts reads the rows' router logits and the experts their pairs
// can reach, once each.
func (e *enc) rowsExperts(io shaders.RowsExpertsIO) {
	pairs := io.Tokens * io.TopK
	c := experts(io.Gate, pairs, io.Experts).Plus(experts(io.Up, pairs, io.Experts)).Plus(moved(io.Tokens * io.Experts))
	if e.add(c) {
		e.check(e.k.QMVRowsExpertsSwiGLURouted(e.cb, io))
	}
}

// moeRowsDown reads the experts the rows' pairs can reach and the shared
// expert's down projection, and writes each row's output.
func (e *enc) moeRowsDown(io shaders.MoERowsDownIO, count int) {
	pairs := io.Tokens * io.TopK
	c := experts(io.Down, pairs, count).Plus(matmul(io.SharedDown, io.Tokens)).Plus(moved(2 * pairs))
	if e.add(c) {
		e.check(e.k.MoERowsDownCombine(e.cb, io))
	}
}

// moeRows writes the MoE block's output for the n normalised decode rows
// of ca.xn into ca.delta: the router, the shared expert's gate and its
// SwiGLU as multi-row products, each row's top-k with its experts' SwiGLU
// over the (row, choice) pairs, then their down projections with the
// shared expert's and the combine, per row.
func (m *Model) moeRows(e *enc, ca *chunkActs, l *layer, n int) {
	c := m.cfg
	e.qmvRows(ca.router, l.router, ca.xn, n)
	e.qmvRows(ca.shGate, l.shExpertGate, ca.xn, n)
	e.qmvRowsSwiGLU(ca.shH, l.shGate, l.shUp, ca.xn, n)
	e.barrier()
	// The experts' SwiGLU routes for itself (no level of its own for the
	// top-k).
	e.rowsExperts(shaders.RowsExpertsIO{
		Out: ca.eh, Gate: l.gate, Up: l.up, X: ca.xn, IDs: ca.ids, Weights: ca.weights, Logits: ca.router,
		Experts: c.Experts, TopK: c.TopK, NormalizeTopK: c.NormTopK, Tokens: n,
	})
	e.barrier()
	e.moeRowsDown(shaders.MoERowsDownIO{
		Out: ca.delta, Down: l.down, H: ca.eh, IDs: ca.ids, Weights: ca.weights, TopK: c.TopK,
		SharedDown: l.shDown, SharedH: ca.shH, SharedGate: ca.shGate, Tokens: n,
	}, c.Experts)
}
