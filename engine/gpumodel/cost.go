package gpumodel

import (
	"errors"

	"petal/gpu"
	"petal/shaders"
)

// The smallest GPU Petal supports, and how long one command buffer may
// keep it busy. macOS ends a command buffer that runs too long
// (kIOGPUCommandBufferCallbackErrorTimeout, or ...ImpactingInteractivity
// while the display waits on the GPU), so no command buffer may carry more
// estimated work than the base M1 finishes in maxCommandBufferMillis at its
// full rate. Real kernels run below the full rate, so a buffer at the bound
// still ends within about a second, far below the watchdog, and the window
// server gets the GPU between buffers.
const (
	// m1FlopsPerSecond is the 8-core M1 GPU's fp32 rate: 1024 ALUs, a
	// fused multiply-add (2 flops) each per cycle at 1.278 GHz.
	m1FlopsPerSecond = 2.6e12
	// m1BytesPerSecond is the M1's memory bandwidth: LPDDR4X-4266 on a
	// 128-bit bus.
	m1BytesPerSecond = 68e9
	// maxCommandBufferMillis bounds one command buffer's estimated time on
	// the M1 (Cost.M1Millis).
	maxCommandBufferMillis = 250
)

// floatBytes is the size of the float32 activations the kernels read and
// write; routeEntryBytes of one entry of MoERoute's block map (a uint4).
const (
	floatBytes      = 4
	routeEntryBytes = 16
)

// Cost is the work a dispatch or a command buffer carries, estimated from
// the shapes of the ops it encodes.
type Cost struct {
	// Flops counts the arithmetic of the matrix products (2 per
	// multiply-add), the attention (QK and PV) and the DeltaNet
	// recurrence; the elementwise ops (norms, activations, routing) do a
	// few flops per 4 bytes they move, far below the M1's 38 flops a byte,
	// so their bytes alone stand for them.
	Flops int64
	// Bytes counts device memory read and written: the weights an op binds
	// (each once), the caches and the activations.
	Bytes int64
}

// Plus is the cost of both.
func (c Cost) Plus(d Cost) Cost { return Cost{Flops: c.Flops + d.Flops, Bytes: c.Bytes + d.Bytes} }

// M1Millis is how long the M1 takes for c at its full rate: the longer of
// its arithmetic and its memory traffic.
func (c Cost) M1Millis() float64 {
	return max(float64(c.Flops)/m1FlopsPerSecond, float64(c.Bytes)/m1BytesPerSecond) * 1000
}

// weightBytes is the size of a quantized matrix: its codes, and a bf16
// scale and bias per group.
func weightBytes(m shaders.QMatrix) int64 {
	return int64(m.Rows)*int64(m.Cols)*int64(m.Bits)/8 + 2*int64(m.Rows)*int64(m.Cols/m.GroupSize)*2
}

// floats is the bytes of n float32 activations.
func floats(n int) int64 { return floatBytes * int64(n) }

// matmul is the cost of rows x cols weights times tokens activation rows
// (each read once, each output written once).
func matmul(m shaders.QMatrix, tokens int) Cost {
	return Cost{
		Flops: 2 * int64(tokens) * int64(m.Rows) * int64(m.Cols),
		Bytes: weightBytes(m) + floats(tokens*m.Cols) + floats(tokens*m.Rows),
	}
}

// experts is the cost of a grouped product of pairs rows over the stacked
// experts m: every expert that pairs can reach is read once.
func experts(m shaders.QMatrix, pairs, count int) Cost {
	return Cost{
		Flops: 2 * int64(pairs) * int64(m.Rows) * int64(m.Cols),
		Bytes: int64(min(pairs, count))*weightBytes(m) + floats(pairs*m.Cols) + floats(pairs*m.Rows),
	}
}

// attention is the cost of tokens query rows at positions pos0.. attending
// causally to the cache: 4 flops per query, key and head dim (QK and PV),
// and every K and V row read once per group of tokens that one
// threadgroup attends together; q, gate and o are read or written once.
func attention(a shaders.AttnShape, pos0, tokens, group int) Cost {
	keys := int64(tokens)*int64(pos0) + int64(tokens)*int64(tokens+1)/2
	group = min(group, shaders.AttnPrefillRows(tokens)) // a short run's threadgroups take fewer
	var rows int64
	for t0 := 0; t0 < tokens; t0 += group {
		rows += int64(pos0 + min(t0+group, tokens))
	}
	return Cost{
		Flops: 4 * keys * int64(a.HeadDim) * int64(a.Heads),
		Bytes: kvBytes(a, rows) + floats(3*tokens*a.Heads*a.HeadDim),
	}
}

// kvBytes is rows K and V rows of one attention layer.
func kvBytes(a shaders.AttnShape, rows int64) int64 {
	return 2 * rows * int64(a.KVHeads*a.HeadDim) * shaders.KVElementBytes
}

// deltaState is the bytes of one DeltaNet layer's recurrent state.
func deltaState(d shaders.DeltaShape) int64 {
	return floats(d.ValueHeads * d.KeyDim * d.ValueDim)
}

// deltaScan is the chunked recurrence over tokens: per value head and
// block of C = DeltaChunk tokens, the C x C products of keys with keys and
// queries, the triangular solve (about C^3/3), the C x C mixes of keys and
// values, and the state's three products with the block (update, output,
// correction); its block scratch written and read once, the state loaded
// and stored once.
func deltaScan(d shaders.DeltaShape, tokens int) Cost {
	c, dk, dv := int64(shaders.DeltaChunk), int64(d.KeyDim), int64(d.ValueDim)
	blocks := int64((tokens + shaders.DeltaChunk - 1) / shaders.DeltaChunk)
	perBlock := 2 * (3*c*c*dk + c*c*dv + c*c*c/3 + 3*c*dk*dv + c*c*dv)
	io := floats(tokens * (d.Channels() + 2*d.ValueHeads*d.ValueDim + 2*d.ValueHeads))
	return Cost{
		Flops: blocks * int64(d.ValueHeads) * perBlock,
		Bytes: io + 2*deltaState(d) + 2*floats(shaders.DeltaScanScratch(d, tokens)),
	}
}

// deltaStep is one token's recurrence: per value head the decay and rank-1
// update of the key x value state and its product with the query (three
// passes over the state), the state read and written once.
func deltaStep(d shaders.DeltaShape) Cost {
	return Cost{
		Flops: 6 * int64(d.ValueHeads) * int64(d.KeyDim) * int64(d.ValueDim),
		Bytes: 2*deltaState(d) + floats(d.Channels()+2*d.ValueHeads*d.ValueDim+2*d.ValueHeads),
	}
}

// conv is the depthwise causal conv over tokens rows of c channels.
func conv(c, kern, tokens int) Cost {
	return Cost{
		Flops: 2 * int64(tokens) * int64(c) * int64(kern),
		Bytes: floats(2*tokens*c + 2*c*(kern-1) + c*kern),
	}
}

// moved is an op whose cost is the floats it reads and writes.
func moved(n int) Cost { return Cost{Bytes: floats(n)} }

// embedRows is the cost of gathering tokens rows of the embedding.
func embedRows(m shaders.QMatrix, tokens int) Cost {
	row := shaders.QMatrix{Rows: 1, Cols: m.Cols, Bits: m.Bits, GroupSize: m.GroupSize}
	return Cost{Bytes: int64(tokens)*weightBytes(row) + floats(tokens*(m.Cols+1))}
}

// enc encodes ops into cb and adds up their cost; with cb nil it only adds
// up the cost, which is how the prefill sizes its command buffers before
// encoding them. Every op the model encodes goes through here, so the
// estimate and the dispatches come from the same shapes.
type enc struct {
	k    *shaders.Kernels
	cb   gpu.CommandBuffer
	cost Cost
	errs []error
	// open is set by a dispatch and cleared by a barrier: a barrier with
	// nothing before it orders nothing.
	open bool
}

func (e *enc) add(c Cost) bool {
	e.cost = e.cost.Plus(c)
	e.open = true
	return e.cb != nil
}

func (e *enc) check(err error) {
	if err != nil {
		e.errs = append(e.errs, err)
	}
}

func (e *enc) err() error { return errors.Join(e.errs...) }

func (e *enc) barrier() {
	if e.open && e.cb != nil {
		e.cb.Barrier()
	}
	e.open = false
}

func (e *enc) qmm(out shaders.View, m shaders.QMatrix, x shaders.View, tokens int) {
	if e.add(matmul(m, tokens)) {
		e.check(e.k.QMM(e.cb, out, m, x, tokens))
	}
}

func (e *enc) qmmExperts(out shaders.View, m shaders.QMatrix, x shaders.View, xRows, xDiv int, blocks, mapping shaders.View, pairs, count int) {
	if e.add(experts(m, pairs, count)) {
		e.check(e.k.QMMExperts(e.cb, out, m, x, xRows, xDiv, blocks, mapping, pairs, count))
	}
}

func (e *enc) qmv(out shaders.View, m shaders.QMatrix, x shaders.View) {
	if e.add(matmul(m, 1)) {
		e.check(e.k.QMV(e.cb, out, m, x))
	}
}

func (e *enc) qmvAdd(y shaders.View, m shaders.QMatrix, x shaders.View) {
	if e.add(matmul(m, 1).Plus(moved(m.Rows))) {
		e.check(e.k.QMVAdd(e.cb, y, m, x))
	}
}

func (e *enc) normQMVMulti(io shaders.NormQMVMultiIO) {
	c := moved(len(io.Ms) * io.Ms[0].Cols) // the norm gains
	for _, m := range io.Ms {
		c = c.Plus(matmul(m, 1))
	}
	if e.add(c) {
		e.check(e.k.NormQMVMulti(e.cb, io))
	}
}

func (e *enc) normQMVSwiGLU(io shaders.NormQMVSwiGLUIO) {
	if e.add(matmul(io.Gate, 1).Plus(matmul(io.Up, 1))) {
		e.check(e.k.NormQMVSwiGLU(e.cb, io))
	}
}

// routedSwiGLU reads the router logits and its TopK experts' gate and up
// matrices.
func (e *enc) routedSwiGLU(io shaders.RoutedSwiGLUIO) {
	c := experts(io.Gate, io.TopK, io.Experts).Plus(experts(io.Up, io.TopK, io.Experts)).Plus(moved(io.Experts))
	if e.add(c) {
		e.check(e.k.NormQMVExpertsSwiGLURouted(e.cb, io))
	}
}

// moeDownCombine reads its TopK experts' down matrices and the shared
// expert's, and updates the residual stream.
func (e *enc) moeDownCombine(io shaders.MoEDownIO) {
	c := experts(io.Down, io.TopK, io.TopK).Plus(matmul(io.SharedDown, 1)).Plus(moved(2 * io.Down.Rows))
	if e.add(c) {
		e.check(e.k.MoEDownCombine(e.cb, io))
	}
}

func (e *enc) embed(out shaders.View, m shaders.QMatrix, token shaders.View) {
	if e.add(embedRows(m, 1)) {
		e.check(e.k.Embed(e.cb, out, m, token))
	}
}

func (e *enc) embedRows(out shaders.View, m shaders.QMatrix, tokens shaders.View, rows int) {
	if e.add(embedRows(m, rows)) {
		e.check(e.k.EmbedRows(e.cb, out, m, tokens, rows))
	}
}

func (e *enc) rmsNorm(out, x, w shaders.View, n, rows int, eps float32) {
	if e.add(moved(2*n*rows + n)) {
		e.check(e.k.RMSNorm(e.cb, out, x, w, n, rows, eps))
	}
}

// addRMSNormRows reads x and delta, writes x and the norm.
func (e *enc) addRMSNormRows(x, delta, out, w shaders.View, n, rows int, eps float32) {
	if e.add(moved(4*n*rows + n)) {
		e.check(e.k.AddRMSNormRows(e.cb, x, delta, out, w, n, rows, eps))
	}
}

// attnPrep reads q with its gate, k and v of rows tokens, writes q, the
// gate and the cache rows.
func (e *enc) attnPrep(io shaders.AttnPrepIO, rows int) {
	a := io.Shape
	c := moved(rows * (4*a.Heads*a.HeadDim + 2*a.KVHeads*a.HeadDim))
	c.Bytes += kvBytes(a, int64(rows))
	if !e.add(c) {
		return
	}
	if rows == 1 {
		e.check(e.k.AttnPrep(e.cb, io))
	} else {
		e.check(e.k.AttnPrepRows(e.cb, io, rows))
	}
}

// attnPrefill attends io.Tokens query rows; group is how many tokens one
// threadgroup attends (shaders.Kernels.AttnPrefillGroupTokens).
func (e *enc) attnPrefill(io shaders.AttnPrefillIO, group int) {
	if e.add(attention(io.Shape, io.Pos0, io.Tokens, group)) {
		e.check(e.k.AttnPrefill(e.cb, io))
	}
}

// attnDecode attends one query to io.N positions, through its scratch of
// per-block partial results (written, then read).
func (e *enc) attnDecode(io shaders.AttnDecodeIO) {
	c := attention(io.Shape, io.N-1, 1, 1)
	c.Bytes += 2 * int64(shaders.AttnScratchBytes(io.Shape, io.N))
	if e.add(c) {
		e.check(e.k.AttnDecode(e.cb, io))
	}
}

// attnDecodeRows is attnDecode of several queries, each over its own
// cache: their block passes in one level and their merges in the next,
// where one query after another would take two levels each.
func (e *enc) attnDecodeRows(ios []shaders.AttnDecodeIO) {
	var merges []gpu.Dispatch
	for _, io := range ios {
		c := attention(io.Shape, io.N-1, 1, 1)
		c.Bytes += 2 * int64(shaders.AttnScratchBytes(io.Shape, io.N))
		if !e.add(c) {
			continue
		}
		var cp capture
		if err := e.k.AttnDecode(&cp, io); err != nil {
			e.check(err)
			continue
		}
		merge := false
		for _, it := range cp.items {
			switch {
			case it.barrier:
				merge = true
			case merge:
				merges = append(merges, it.d)
			default:
				e.check(e.cb.Dispatch(&it.d))
			}
		}
	}
	if len(merges) > 0 {
		e.cb.Barrier()
		for i := range merges {
			e.check(e.cb.Dispatch(&merges[i]))
		}
	}
}

func (e *enc) deltaStepConv(io shaders.DeltaStepConvIO) {
	d := io.Shape
	if e.add(deltaStep(d).Plus(conv(d.Channels(), d.ConvKernel, 1))) {
		e.check(e.k.DeltaStepConv(e.cb, io))
	}
}

func (e *enc) deltaConvShift(u, state shaders.View, c, kern int) {
	if e.add(moved(c + 2*c*(kern-1))) {
		e.check(e.k.DeltaConvShift(e.cb, u, state, c, kern))
	}
}

func (e *enc) deltaConvRows(out, u, state, w shaders.View, c, kern, tokens int) {
	if e.add(conv(c, kern, tokens)) {
		e.check(e.k.DeltaConvRows(e.cb, out, u, state, w, c, kern, tokens))
	}
}

func (e *enc) deltaScan(io shaders.DeltaScanIO) {
	if e.add(deltaScan(io.Shape, io.Tokens)) {
		e.check(e.k.DeltaScan(e.cb, io))
	}
}

func (e *enc) routerTopKRows(ids, weights, logits shaders.View, count, topK int, normalize bool, rows int) {
	if e.add(moved(rows * (count + 2*topK))) {
		e.check(e.k.RouterTopKRows(e.cb, ids, weights, logits, count, topK, normalize, rows))
	}
}

func (e *enc) swiGLU(out, gate, up shaders.View, n int) {
	if e.add(moved(3 * n)) {
		e.check(e.k.SwiGLU(e.cb, out, gate, up, n))
	}
}

// moeRoute reads the pairs' ids, writes their mapping and slots and the
// block map.
func (e *enc) moeRoute(mapping, slotOf, blocks, ids shaders.View, pairs, count int) {
	c := moved(3 * pairs)
	c.Bytes += int64(shaders.RouteCapacity(pairs, count)) * routeEntryBytes
	if e.add(c) {
		e.check(e.k.MoERoute(e.cb, mapping, slotOf, blocks, ids, pairs, count))
	}
}

// moeCombineRows reads every pair's output and weight, the shared expert's
// output and gate, and writes the rows.
func (e *enc) moeCombineRows(out, ys, weights, slotOf, shared, sharedGate shaders.View, h, topK, tokens int) {
	if e.add(moved(tokens * (topK*h + 2*topK + 2*h + 1))) {
		e.check(e.k.MoECombineRows(e.cb, out, ys, weights, slotOf, shared, sharedGate, h, topK, tokens))
	}
}

// argmax reads n logits.
func (e *enc) argmax(out, logits shaders.View, n int) {
	if e.add(moved(n + 1)) {
		e.check(e.k.Argmax(e.cb, out, logits, n))
	}
}

// sample reads the logits, the mask and the request's counts, and writes
// the state and the record.
func (e *enc) sample(sm shaders.Sampling) {
	c := moved(sm.N)
	c.Bytes += int64(shaders.SampleMaskBytes(sm.N)) + 2*int64(shaders.SampleStateBytes(sm.N)) + int64(shaders.SampleRecordBytes)
	if e.add(c) {
		e.check(e.k.Sample(e.cb, sm))
	}
}
