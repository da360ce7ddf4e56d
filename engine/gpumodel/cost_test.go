package gpumodel

import (
	"math"
	"slices"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/shaders"
)

// tensorBytes is what the checkpoint stores for m: codes, scales, biases.
func tensorBytes(m *checkpoint.Matrix) int64 {
	var n int64
	for _, t := range []*struct{ b, e int64 }{{m.Weight.Begin, m.Weight.End}, {m.Scales.Begin, m.Scales.End}, {m.Biases.Begin, m.Biases.End}} {
		n += t.e - t.b
	}
	return n
}

// One attention layer of the 35B plan over a chunk of 512 tokens after
// 4096 positions, the sum of its pieces' costs against a count by hand:
// 2·m·n·k flops per product, 4·q·kv·head_dim·heads for the attention, the
// layer's weights as the checkpoint stores them (every expert, as 4096
// routed pairs can reach all 256), the K/V rows each threadgroup's tokens
// read, and every activation each op reads or writes.
func TestLayerCostHandCount(t *testing.T) {
	cfg := checkpoint.Qwen36()
	m := openShapeOnly(t, cfg)
	s, err := m.newSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n, pos = 512, 4096
	li := slices.Index(cfg.Layers, checkpoint.Attention)
	ch := chunk{pos: pos, n: n}
	var got Cost
	for _, p := range []piece{{kind: pieceAttnIn, layer: li}, {kind: pieceAttn, layer: li, t1: n}, {kind: pieceAttnOut, layer: li}} {
		got = got.Plus(s.pieceCost(ch, p))
	}

	h, heads, kvh, hd := int64(cfg.Hidden), int64(cfg.Heads), int64(cfg.KVHeads), int64(cfg.HeadDim)
	ex, topK, ei, si := int64(cfg.Experts), int64(cfg.TopK), int64(cfg.ExpertIntermediate), int64(cfg.SharedIntermediate)
	N, pairs := int64(n), int64(n)*int64(cfg.TopK)
	// The products: q with its gate, k, v, o; router, shared expert gate,
	// shared gate, up and down; the experts' gate, up and down.
	flops := 2*N*(2*heads*hd)*h + 2*2*N*(kvh*hd)*h + 2*N*h*(heads*hd) +
		2*N*ex*h + 2*N*1*h + 2*2*N*si*h + 2*N*h*si +
		2*2*pairs*ei*h + 2*pairs*h*ei
	// Query t at position pos+t sees pos+t+1 keys.
	var keys int64
	for q := range N {
		keys += pos + q + 1
	}
	flops += 4 * keys * hd * heads

	l := &m.ckpt.Layers[li]
	var weights int64
	for _, w := range []*checkpoint.Matrix{&l.Attn.Q, &l.Attn.K, &l.Attn.V, &l.Attn.O,
		&l.MoE.Router, &l.MoE.SharedExpertGate, &l.MoE.SharedGate, &l.MoE.SharedUp, &l.MoE.SharedDown,
		&l.MoE.Gate, &l.MoE.Up, &l.MoE.Down} {
		weights += tensorBytes(w)
	}
	// K and V rows, fp16: each group of 32 query rows (the pipeline's
	// threadgroup) reads rows up to its last token's position.
	g, err := m.attnGroupTokens()
	if err != nil {
		t.Fatal(err)
	}
	var rows int64
	for t0 := int64(0); t0 < N; t0 += int64(g) {
		rows += pos + min(t0+int64(g), N)
	}
	kv := 2 * rows * kvh * hd * 2
	// float32 activations, op by op.
	acts := N*h + N*2*heads*hd + 2*(N*h+N*kvh*hd) + // q, k, v products
		N*(2*heads*hd+2*kvh*hd) + N*2*heads*hd + // the prep reads qg, k, v, writes q and the gate
		3*N*heads*hd + // the attention's q, gate, o
		N*heads*hd + N*h + // o
		2*(4*N*h+h) + // the two residual adds with their norms
		N*h + N*ex + N*h + N + 2*(N*h+N*si) + // router, shared gates and ups
		N*(ex+2*topK) + 3*N*si + // top-k, shared SwiGLU
		3*pairs + N*si + N*h + // routing, shared down
		2*(pairs*h+pairs*ei) + 3*pairs*ei + pairs*ei + pairs*h + // experts
		N*(topK*h+2*topK+2*h+1) // combine
	bytes := weights + kv + 4*acts + N*2*kvh*hd*2 + 16*int64(shaders.RouteCapacity(int(pairs), int(ex))) // a uint4 a block-map entry

	if got.Flops != flops {
		t.Errorf("flops %d, by hand %d", got.Flops, flops)
	}
	if got.Bytes != bytes {
		t.Errorf("bytes %d, by hand %d (weights %d, K/V %d)", got.Bytes, bytes, weights, kv)
	}
	t.Logf("one attention layer, 512 tokens after 4096: %.4g flops, %.4g bytes, %.1f ms on the M1", float64(got.Flops), float64(got.Bytes), got.M1Millis())
}

// A prompt through the prefill cut into every piece alone (a bound no
// piece meets: each layer, and each 32-row block of the attention, in a
// command buffer of its own), in two chunks so the second's blocks start
// after cached positions, gives bit for bit the logits and the greedy
// continuation of the prompt in one command buffer a chunk.
func TestPrefillSplitMatches(t *testing.T) {
	dev := openDevice(t)
	m := openFixture(t, dev, "tiny-a")
	m.prefillChunk = 96
	ref, _ := loadReference(t, fixturesDir+"/tiny-a")
	prompt := ref.Tokens[:160]
	v := m.cfg.Vocab
	run := func(maxMillis float64) ([]float32, []int, int) {
		m.maxMillis = maxMillis
		seq, err := m.newSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer seq.Close()
		// The buffers of the second chunk, after the first's positions.
		if err := seq.ensureCapacity(len(prompt)); err != nil {
			t.Fatal(err)
		}
		bufs, err := seq.splitChunk(chunk{pos: 96, n: 64, logits: allLogits})
		if err != nil {
			t.Fatal(err)
		}
		logits := make([]float32, len(prompt)*v)
		if err := seq.Forward(prompt, logits); err != nil {
			t.Fatal(err)
		}
		g, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		out, err := engine.Greedy(t.Context(), g, v, prompt, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		return logits, out, len(bufs)
	}
	whole, wholeOut, wholeBufs := run(maxCommandBufferMillis)
	split, splitOut, splitBufs := run(0)
	// Embedding, 4 layers (the attention layer as its products, 2 blocks
	// and the rest), logits.
	if wholeBufs != 1 || splitBufs != 1+3+4+1 {
		t.Errorf("the second chunk in %d command buffers whole and %d split, want 1 and 9", wholeBufs, splitBufs)
	}
	for i := range whole {
		if math.Float32bits(whole[i]) != math.Float32bits(split[i]) {
			t.Fatalf("logit %d of position %d: %g split, %g whole", i%v, i/v, split[i], whole[i])
		}
	}
	if !slices.Equal(wholeOut, splitOut) {
		t.Errorf("greedy after the prompt: %v split, %v whole", splitOut, wholeOut)
	}
}
