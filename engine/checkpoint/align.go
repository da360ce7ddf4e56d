package checkpoint

import "petal/engine/safetensors"

// Alignment the GPU backend needs of a quantized matrix's tensors, as byte
// offsets into their mapped shard, so that it can bind them in place: the
// kernels read codes as 8-byte words (qmv's uint2), and Metal binds a
// buffer only at offsets that are multiples of 4 (scales and biases, read
// as bfloat). shaders.CodesAlign and shaders.ScalesAlign state the same
// rule on the kernels' side; the GPU backend checks every matrix against
// those once at load, so the two cannot drift apart unnoticed.
const (
	GPUCodesAlign  = 8
	GPUScalesAlign = 4
)

// GPUMisaligned lists the tensors of x that the GPU backend cannot bind in
// place and copies into aligned buffers at load. Dense matrices are never
// bound (the backend refuses them), nor tensors without a file (a
// shape-only model).
func (x *Matrix) GPUMisaligned() []*safetensors.Tensor {
	if x.Bits == 0 {
		return nil
	}
	var out []*safetensors.Tensor
	add := func(t *safetensors.Tensor, align int64) {
		if t != nil && t.File != nil && t.Offset%align != 0 {
			out = append(out, t)
		}
	}
	add(x.Weight, GPUCodesAlign)
	add(x.Scales, GPUScalesAlign)
	add(x.Biases, GPUScalesAlign)
	return out
}

// Matrices lists every matrix of the model: embedding, lm_head, then each
// layer's in order.
func (m *Model) Matrices() []*Matrix {
	out := []*Matrix{&m.Embed, &m.LMHead}
	for i := range m.Layers {
		l := &m.Layers[i]
		if a := l.Attn; a != nil {
			out = append(out, &a.Q, &a.K, &a.V, &a.O)
		}
		if d := l.Delta; d != nil {
			out = append(out, &d.QKV, &d.Z, &d.B, &d.A, &d.Out)
		}
		e := &l.MoE
		out = append(out, &e.Router, &e.Gate, &e.Up, &e.Down, &e.SharedGate, &e.SharedUp, &e.SharedDown, &e.SharedExpertGate)
	}
	return out
}

// GPUCopyBytes is how many bytes of weights the GPU backend copies at load
// because they are misaligned for its kernels (see [Matrix.GPUMisaligned]);
// 0 for a folder stored aligned.
func (m *Model) GPUCopyBytes() int64 {
	var n int64
	for _, x := range m.Matrices() {
		for _, t := range x.GPUMisaligned() {
			n += int64(len(t.Data))
		}
	}
	return n
}

// MisalignedBytes opens the checkpoint in dir (mapping its shards, which
// reads nothing but their headers) and returns [Model.GPUCopyBytes]: what
// the GPU backend would copy at load. It opens no GPU, so the memory-fit
// check and the download manager can ask it anywhere.
func MisalignedBytes(dir string) (int64, error) {
	m, err := Open(dir)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	return m.GPUCopyBytes(), nil
}
