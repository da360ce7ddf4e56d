package shaders_test

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"petal/gpu"
	"petal/gpu/sim"
	"petal/shaders"
)

// device opens one sim device per test binary; the library cache is shared
// with later runs through PETAL_SIM_CACHE or the user cache.
func device(t testing.TB) *sim.Device {
	t.Helper()
	d, err := sim.Open(sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func pipeline(t testing.TB, d gpu.Device, file, fn string) gpu.Pipeline {
	t.Helper()
	src, err := shaders.Source(file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.NewPipeline(gpu.Source{Name: file, Text: src}, fn)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func floats(t testing.TB, d gpu.Device, v []float32) gpu.Buffer {
	t.Helper()
	b, err := d.NewBuffer(4 * len(v))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range v {
		binary.LittleEndian.PutUint32(b.Contents()[4*i:], math.Float32bits(f))
	}
	return b
}

func readFloats(b gpu.Buffer, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b.Contents()[4*i:]))
	}
	return out
}

func u16s(t testing.TB, d gpu.Device, v []uint16) gpu.Buffer {
	t.Helper()
	b, err := d.NewBuffer(2 * len(v))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range v {
		binary.LittleEndian.PutUint16(b.Contents()[2*i:], x)
	}
	return b
}

func u32s(t testing.TB, d gpu.Device, v []uint32) gpu.Buffer {
	t.Helper()
	b, err := d.NewBuffer(4 * len(v))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range v {
		binary.LittleEndian.PutUint32(b.Contents()[4*i:], x)
	}
	return b
}

// bf16 rounds f to bfloat16, nearest with ties to even (as MLX stores it).
func bf16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func fromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func run(t testing.TB, d gpu.Device, ds ...*gpu.Dispatch) error {
	t.Helper()
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ds {
		if err := cb.Dispatch(x); err != nil {
			t.Fatal(err)
		}
		cb.Barrier()
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	return cb.Wait()
}

// close reports whether got is within tol of want, relative to scale.
func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestRMSNorm(t *testing.T) {
	d := device(t)
	p := pipeline(t, d, "rmsnorm.metal", "rmsnorm_f32_bf16")
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct{ rows, n, threads int }{
		{1, 1, 32},     // one element
		{3, 31, 32},    // fewer elements than threads
		{2, 100, 64},   // not a multiple of the threadgroup
		{4, 2048, 256}, // the model's hidden size
		{1, 1000, 1024},
		{2, 77, 96}, // threadgroup of three simd-groups
		{1, 50, 40}, // partial last simd-group
	}
	for _, c := range cases {
		stride := c.n + 3 // rows not packed, to test the stride
		x := make([]float32, c.rows*stride)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 3)
		}
		w := make([]uint16, c.n)
		for i := range w {
			w[i] = bf16(float32(rng.NormFloat64() * 0.1))
		}
		args := shaders.RMSNormArgs{N: int32(c.n), Eps: 1e-6, WeightOffset: 1, RowStride: uint64(stride)}
		xb, wb := floats(t, d, x), u16s(t, d, w)
		yb := floats(t, d, make([]float32, len(x)))
		err := run(t, d, &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: c.rows, Y: 1, Z: 1}, Threads: gpu.Size{X: c.threads, Y: 1, Z: 1},
			Args: []gpu.Arg{gpu.BytesArg(0, shaders.Bytes(&args)), gpu.BufferArg(1, xb, 0), gpu.BufferArg(2, wb, 0), gpu.BufferArg(3, yb, 0)}})
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		y := readFloats(yb, len(x))
		for r := range c.rows {
			var ss float64
			for i := range c.n {
				v := float64(x[r*stride+i])
				ss += v * v
			}
			scale := 1 / math.Sqrt(ss/float64(c.n)+1e-6)
			for i := range c.n {
				want := float64(x[r*stride+i]) * scale * (1 + float64(fromBF16(w[i])))
				// fp32 accumulation of n squares: relative error ~ n * 2^-24.
				if got := float64(y[r*stride+i]); !within(got, want, 1e-5*math.Abs(want)+1e-6) {
					t.Fatalf("%+v: y[%d][%d] = %v, want %v", c, r, i, got, want)
				}
			}
			for i := c.n; i < stride; i++ {
				if y[r*stride+i] != 0 {
					t.Fatalf("%+v: wrote padding y[%d][%d]", c, r, i)
				}
			}
		}
	}
}

// quantize packs w (rows x k) in MLX's affine 4-bit layout and returns the
// codes, bf16 scales and biases.
func quantize(w []float32, rows, k int) ([]uint32, []uint16, []uint16) {
	codes := make([]uint32, rows*k/8)
	groups := k / shaders.QMVGroupSize
	scales := make([]uint16, rows*groups)
	biases := make([]uint16, rows*groups)
	for r := range rows {
		for g := range groups {
			lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
			for c := g * 64; c < g*64+64; c++ {
				lo, hi = min(lo, w[r*k+c]), max(hi, w[r*k+c])
			}
			s := bf16((hi - lo) / 15)
			b := bf16(lo)
			scales[r*groups+g], biases[r*groups+g] = s, b
			for c := g * 64; c < g*64+64; c++ {
				q := 0
				if fs := fromBF16(s); fs != 0 {
					q = int(math.Round(float64((w[r*k+c] - fromBF16(b)) / fs)))
				}
				q = max(0, min(15, q))
				codes[(r*k+c)/8] |= uint32(q) << (4 * (c % 8))
			}
		}
	}
	return codes, scales, biases
}

// qmvRef dequantizes in fp32 and accumulates in float64.
func qmvRef(codes []uint32, scales, biases []uint16, x []float32, rows, k int) []float64 {
	y := make([]float64, rows)
	groups := k / 64
	for r := range rows {
		for c := range k {
			q := (codes[(r*k+c)/8] >> (4 * (c % 8))) & 0xf
			wv := fromBF16(scales[r*groups+c/64])*float32(q) + fromBF16(biases[r*groups+c/64])
			y[r] += float64(wv) * float64(x[c])
		}
	}
	return y
}

func qmvDispatch(p gpu.Pipeline, args *shaders.QMVArgs, codes, scales, biases, x, y gpu.Buffer) *gpu.Dispatch {
	perGroup := shaders.QMVRows * shaders.QMVSimdgroups
	return &gpu.Dispatch{
		Pipeline: p,
		Groups:   gpu.Size{X: (int(args.Rows) + perGroup - 1) / perGroup, Y: 1, Z: 1},
		Threads:  gpu.Size{X: 32 * shaders.QMVSimdgroups, Y: 1, Z: 1},
		Args: []gpu.Arg{gpu.BytesArg(0, shaders.Bytes(args)), gpu.BufferArg(1, codes, 0), gpu.BufferArg(2, scales, 0),
			gpu.BufferArg(3, biases, 0), gpu.BufferArg(4, x, 0), gpu.BufferArg(5, y, 0)},
	}
}

func TestQMV(t *testing.T) {
	d := device(t)
	p := pipeline(t, d, "qmv.metal", "qmv_bf16_gs64_b4")
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct{ rows, k int }{
		{1, 64},     // one row, one group: fewer words than lanes
		{3, 128},    // rows not a multiple of QMV_ROWS
		{13, 320},   // rows not a multiple of a threadgroup's rows; k not a multiple of 256
		{8, 2048},   // exactly one threadgroup
		{37, 4096},  // several threadgroups, long rows
		{512, 2048}, // the model's projection width
	}
	for _, c := range cases {
		w := make([]float32, c.rows*c.k)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * 0.05)
		}
		x := make([]float32, c.k)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		codes, scales, biases := quantize(w, c.rows, c.k)
		args := shaders.QMVArgs{Rows: int32(c.rows), K: int32(c.k)}
		yb := floats(t, d, make([]float32, c.rows))
		if err := run(t, d, qmvDispatch(p, &args, u32s(t, d, codes), u16s(t, d, scales), u16s(t, d, biases), floats(t, d, x), yb)); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		want := qmvRef(codes, scales, biases, x, c.rows, c.k)
		got := readFloats(yb, c.rows)
		for r := range c.rows {
			// fp32 accumulation over k products of magnitude ~|w||x|:
			// error bound ~ k * 2^-24 * sum|w x|, well under 1e-4 * k here.
			if !within(float64(got[r]), want[r], 2e-6*float64(c.k)) {
				t.Fatalf("%+v: y[%d] = %v, want %v", c, r, got[r], want[r])
			}
		}
	}
}

func TestArgmax(t *testing.T) {
	d := device(t)
	p := pipeline(t, d, "argmax.metal", "argmax_f32")
	rng := rand.New(rand.NewPCG(5, 6))
	cases := []struct {
		n, threads int
		fill       func(x []float32)
	}{
		{1, 32, nil},
		{5, 64, nil}, // fewer values than threads
		{1000, 1024, nil},
		{151936, 1024, nil}, // the vocabulary
		{300, 96, func(x []float32) { x[7], x[250] = 100, 100 }}, // tie: lowest index wins
		{70, 64, func(x []float32) { x[69] = 50 }},               // last element
		{64, 32, func(x []float32) { x[0] = float32(math.NaN()); x[3] = 9 }},
		{40, 64, func(x []float32) {
			for i := range x {
				x[i] = -1
			}
		}}, // all equal: index 0
	}
	for _, c := range cases {
		x := make([]float32, c.n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		if c.fill != nil {
			c.fill(x)
		}
		want := -1
		for i, v := range x {
			if !math.IsNaN(float64(v)) && (want < 0 || v > x[want]) {
				want = i
			}
		}
		args := shaders.ArgmaxArgs{N: int32(c.n), OutIndex: 1}
		out := u32s(t, d, []uint32{7, 7, 7})
		err := run(t, d, &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: c.threads, Y: 1, Z: 1},
			Args: []gpu.Arg{gpu.BytesArg(0, shaders.Bytes(&args)), gpu.BufferArg(1, floats(t, d, x), 0), gpu.BufferArg(2, out, 0)}})
		if err != nil {
			t.Fatalf("n=%d: %v", c.n, err)
		}
		got := binary.LittleEndian.Uint32(out.Contents()[4:])
		if int(got) != want {
			t.Errorf("n=%d threads=%d: argmax %d, want %d", c.n, c.threads, got, want)
		}
		if o := binary.LittleEndian.Uint32(out.Contents()); o != 7 {
			t.Errorf("n=%d: wrote slot 0", c.n)
		}
	}
}

// TestArgsLayout compiles args.h with the sim and compares every struct's
// size and field offsets, and the shared constants, with the Go mirrors.
func TestArgsLayout(t *testing.T) {
	d := device(t)
	const probe = `#include <metal_stdlib>
#include "args.h"
using namespace metal;
#define OFF(s, f) (uint)__builtin_offsetof(s, f)
kernel void layout(device uint* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    if (tid != 0) return;
    uint v[] = {
        sizeof(RMSNormArgs), OFF(RMSNormArgs, n), OFF(RMSNormArgs, eps), OFF(RMSNormArgs, weight_offset), OFF(RMSNormArgs, row_stride),
        sizeof(QMVArgs), OFF(QMVArgs, rows), OFF(QMVArgs, k),
        sizeof(ArgmaxArgs), OFF(ArgmaxArgs, n), OFF(ArgmaxArgs, out_index),
        RMSNORM_MAX_SIMDGROUPS, QMV_ROWS, QMV_SIMDGROUPS, QMV_GROUP_SIZE, QMV_PER_WORD, ARGMAX_MAX_SIMDGROUPS,
    };
    for (uint i = 0; i < sizeof(v) / sizeof(v[0]); i++) out[i] = v[i];
}
`
	src, err := shaders.Expand("layout.metal", probe)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.NewPipeline(gpu.Source{Name: "layout.metal", Text: src}, "layout")
	if err != nil {
		t.Fatal(err)
	}
	var (
		r shaders.RMSNormArgs
		q shaders.QMVArgs
		a shaders.ArgmaxArgs
	)
	want := []uintptr{
		unsafe.Sizeof(r), unsafe.Offsetof(r.N), unsafe.Offsetof(r.Eps), unsafe.Offsetof(r.WeightOffset), unsafe.Offsetof(r.RowStride),
		unsafe.Sizeof(q), unsafe.Offsetof(q.Rows), unsafe.Offsetof(q.K),
		unsafe.Sizeof(a), unsafe.Offsetof(a.N), unsafe.Offsetof(a.OutIndex),
		shaders.RMSNormMaxSimdgroups, shaders.QMVRows, shaders.QMVSimdgroups, shaders.QMVGroupSize, shaders.QMVPerWord, shaders.ArgmaxMaxSimdgroups,
	}
	out := u32s(t, d, make([]uint32, len(want)))
	if err := run(t, d, &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: 1, Y: 1, Z: 1},
		Args: []gpu.Arg{gpu.BufferArg(0, out, 0)}}); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if got := binary.LittleEndian.Uint32(out.Contents()[4*i:]); uintptr(got) != w {
			t.Errorf("layout value %d: C++ %d, Go %d", i, got, w)
		}
	}
}

func TestSourceExpandsIncludes(t *testing.T) {
	names := shaders.Names()
	if len(names) < 3 {
		t.Fatalf("Names() = %v", names)
	}
	for _, n := range names {
		src, err := shaders.Source(n)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(src, `#include "`) {
			t.Errorf("%s still has a local include", n)
		}
		if !strings.Contains(src, "struct QMVArgs") {
			t.Errorf("%s lacks args.h", n)
		}
	}
	if _, err := shaders.Source("nope.metal"); !errors.Is(err, shaders.ErrNotFound) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := shaders.Expand("x.metal", "#include \"missing.h\"\n"); !errors.Is(err, shaders.ErrNotFound) {
		t.Errorf("missing include: %v", err)
	}
}

// TestFilesHaveHeaders holds the convention that every kernel file opens
// with a comment saying what it computes.
func TestFilesHaveHeaders(t *testing.T) {
	for _, n := range shaders.Names() {
		b, err := os.ReadFile(filepath.Join(".", n))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "// "+n+": ") {
			t.Errorf("%s does not open with `// %s: what it computes`", n, n)
		}
		for _, need := range []string{"Layout:", "Mapping:", "Threadgroup memory:", "CPU reference:"} {
			if !strings.Contains(string(b), need) {
				t.Errorf("%s header lacks %q", n, need)
			}
		}
	}
}
