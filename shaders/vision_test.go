package shaders_test

import (
	"testing"
	"unsafe"

	"petal/shaders"
)

// TestVisionArgsLayout compiles vision.h with the sim and compares its
// structs' sizes and offsets, and its constants, with the Go mirrors.
func TestVisionArgsLayout(t *testing.T) {
	d := device(t)
	const values = `
        sizeof(VisNormArgs), OFF(VisNormArgs, n), OFF(VisNormArgs, eps), OFF(VisNormArgs, rows),
        sizeof(VisDenseArgs), OFF(VisDenseArgs, rows), OFF(VisDenseArgs, cols), OFF(VisDenseArgs, tokens), OFF(VisDenseArgs, act), OFF(VisDenseArgs, accumulate),
        sizeof(VisRopeArgs), OFF(VisRopeArgs, tokens), OFF(VisRopeArgs, heads), OFF(VisRopeArgs, head_dim), OFF(VisRopeArgs, frame),
        sizeof(VisAttnArgs), OFF(VisAttnArgs, tokens), OFF(VisAttnArgs, heads), OFF(VisAttnArgs, head_dim), OFF(VisAttnArgs, frame), OFF(VisAttnArgs, scale),
        sizeof(VisCopyArgs), OFF(VisCopyArgs, n),
        sizeof(MRopePrepArgs), OFF(MRopePrepArgs, heads), OFF(MRopePrepArgs, kv_heads), OFF(MRopePrepArgs, head_dim), OFF(MRopePrepArgs, rotary_dim),
        OFF(MRopePrepArgs, pos), OFF(MRopePrepArgs, eps), OFF(MRopePrepArgs, text), OFF(MRopePrepArgs, delta), OFF(MRopePrepArgs, inv_freq), OFF(MRopePrepArgs, axis),
        VIS_THREADS, VIS_TILE, VIS_DENSE_THREADS, VIS_ATTN_THREADS, VIS_MAX_HEAD_DIM, VIS_ACT_NONE, VIS_ACT_GELU_TANH, VIS_ACT_GELU_ERF,
`
	var (
		n  shaders.VisNormArgs
		dn shaders.VisDenseArgs
		r  shaders.VisRopeArgs
		a  shaders.VisAttnArgs
		c  shaders.VisCopyArgs
		m  shaders.MRopePrepArgs
	)
	want := []uintptr{
		unsafe.Sizeof(n), unsafe.Offsetof(n.N), unsafe.Offsetof(n.Eps), unsafe.Offsetof(n.Rows),
		unsafe.Sizeof(dn), unsafe.Offsetof(dn.Rows), unsafe.Offsetof(dn.Cols), unsafe.Offsetof(dn.Tokens), unsafe.Offsetof(dn.Act), unsafe.Offsetof(dn.Accumulate),
		unsafe.Sizeof(r), unsafe.Offsetof(r.Tokens), unsafe.Offsetof(r.Heads), unsafe.Offsetof(r.HeadDim), unsafe.Offsetof(r.Frame),
		unsafe.Sizeof(a), unsafe.Offsetof(a.Tokens), unsafe.Offsetof(a.Heads), unsafe.Offsetof(a.HeadDim), unsafe.Offsetof(a.Frame), unsafe.Offsetof(a.Scale),
		unsafe.Sizeof(c), unsafe.Offsetof(c.N),
		unsafe.Sizeof(m), unsafe.Offsetof(m.Heads), unsafe.Offsetof(m.KVHeads), unsafe.Offsetof(m.HeadDim), unsafe.Offsetof(m.RotaryDim),
		unsafe.Offsetof(m.Pos), unsafe.Offsetof(m.Eps), unsafe.Offsetof(m.Text), unsafe.Offsetof(m.Delta), unsafe.Offsetof(m.InvFreq), unsafe.Offsetof(m.Axis),
		shaders.VisThreads, shaders.VisTile, shaders.VisDenseThreads, shaders.VisAttnThreads, shaders.VisMaxHeadDim,
		uintptr(shaders.VisActNone), uintptr(shaders.VisActGELUTanh), uintptr(shaders.VisActGELUErf),
	}
	checkLayout(t, d, values, want, "vision.h")
}
