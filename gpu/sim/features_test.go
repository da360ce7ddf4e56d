package sim_test

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
)

func openSim(t *testing.T, opts sim.Options) *sim.Device {
	t.Helper()
	d, err := sim.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func features(t *testing.T) gpu.Source {
	t.Helper()
	b, err := os.ReadFile("testdata/features.metal")
	if err != nil {
		t.Fatal(err)
	}
	return gpu.Source{Name: "features.metal", Text: string(b)}
}

func mustPipeline(t *testing.T, d gpu.Device, src gpu.Source, fn string, cs ...gpu.Constant) gpu.Pipeline {
	t.Helper()
	p, err := d.NewPipeline(src, fn, cs...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func f32buf(t *testing.T, d gpu.Device, v []float32) gpu.Buffer {
	t.Helper()
	w := make([]uint32, len(v))
	for i, f := range v {
		w[i] = math.Float32bits(f)
	}
	return buffer(t, d, w)
}

func u32(b gpu.Buffer, i int) uint32  { return binary.LittleEndian.Uint32(b.Contents()[4*i:]) }
func f32(b gpu.Buffer, i int) float32 { return math.Float32frombits(u32(b, i)) }

func size(x, y int) gpu.Size { return gpu.Size{X: x, Y: y, Z: 1} }

func bf16Bits(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func TestBfloatRoundsToNearestEven(t *testing.T) {
	d := openSim(t, sim.Options{})
	p := mustPipeline(t, d, features(t), "round_bf16")
	x := []float32{1, 1 + 1.0/256, 1 + 3.0/256, -1 - 1.0/256, float32(math.NaN()), float32(math.Inf(-1)),
		float32(math.Copysign(0, -1)), math.MaxFloat32, 1e-40, 3.14159265, -2.71828, 65504.7, 1e30}
	ys, _ := d.NewBuffer(2 * len(x))
	back, _ := d.NewBuffer(4 * len(x))
	if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(len(x), 1),
		Args: []gpu.Arg{gpu.BufferArg(0, f32buf(t, d, x), 0), gpu.BufferArg(1, ys, 0), gpu.BufferArg(2, back, 0)}}); err != nil {
		t.Fatal(err)
	}
	for i, v := range x {
		want := bf16Bits(v)
		if got := binary.LittleEndian.Uint16(ys.Contents()[2*i:]); got != want {
			t.Errorf("bfloat(%g) = %#04x, want %#04x", v, got, want)
		}
		if got := math.Float32bits(f32(back, i)); got != uint32(want)<<16 {
			t.Errorf("float(bfloat(%g)) bits %#08x, want %#08x", v, got, uint32(want)<<16)
		}
	}
}

func TestHalfRounds(t *testing.T) {
	d := openSim(t, sim.Options{})
	p := mustPipeline(t, d, features(t), "round_half")
	cases := []struct{ in, want float32 }{
		{1.0 / 3, 0.333251953125},
		{2049, 2048}, // tie to even
		{2051, 2052}, // tie to even
		{65504, 65504},
		{65520, float32(math.Inf(1))},
		{1e-8, 0},
		{6e-8, 5.9604645e-08}, // smallest subnormal
		{-0.1, -0.0999755859375},
	}
	x := make([]float32, len(cases))
	for i, c := range cases {
		x[i] = c.in
	}
	back, _ := d.NewBuffer(4 * len(x))
	if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(len(x), 1),
		Args: []gpu.Arg{gpu.BufferArg(0, f32buf(t, d, x), 0), gpu.BufferArg(1, back, 0)}}); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		if got := f32(back, i); got != c.want {
			t.Errorf("half(%g) = %g, want %g", c.in, got, c.want)
		}
	}
}

func TestSimdGroupFunctions(t *testing.T) {
	// Fast: in the partial simd-group some shuffles read lanes that do not
	// exist, which the kernel writes out (undefined, and poison in the sim;
	// TestInactiveLaneReads covers that the race check reports it).
	d := openSim(t, sim.Options{Fast: true})
	p := mustPipeline(t, d, features(t), "simd_ops")
	const threads = 48 // a full simd-group and one of 16 lanes
	out, _ := d.NewBuffer(4 * 11 * threads)
	if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(threads, 1),
		Args: []gpu.Arg{gpu.BufferArg(0, out, 0)}}); err != nil {
		t.Fatal(err)
	}
	v := func(l int) uint32 { return uint32(l*l + 3) }
	for tid := range threads {
		l, width := tid%32, 32
		if tid >= 32 {
			width = 16
		}
		var sum, incl, excl, ballot, mx uint32
		mn := uint32(math.MaxUint32)
		for j := range width {
			sum += v(j)
			if j <= l {
				incl += v(j)
			}
			if j < l {
				excl += v(j)
			}
			if v(j)&4 != 0 {
				ballot |= 1 << j
			}
			mx, mn = max(mx, v(j)), min(mn, v(j))
		}
		any12 := uint32(0)
		if width > 3 {
			any12 = 10
		}
		first := uint32(0)
		if l == 0 {
			first = 1
		}
		type want struct {
			value   uint32
			defined bool
		}
		src := func(j int, ok bool) want {
			if !ok {
				return want{value: v(l), defined: true}
			}
			return want{value: v(j), defined: j < width}
		}
		wants := []want{
			src((l+5)%32, true),
			src(l+3, l+3 < 32),
			src(l-2, l >= 2),
			src(l^7, true),
			src(9, true),
			{value: incl, defined: true},
			{value: excl, defined: true},
			{value: ballot, defined: true},
			{value: mx*100000 + mn, defined: true},
			{value: sum, defined: true},
			{value: 100 + any12 + first, defined: true},
		}
		for row, w := range wants {
			if !w.defined {
				continue // reads a lane the simd-group lacks: undefined on the GPU
			}
			if got := u32(out, row*threads+tid); got != w.value {
				t.Errorf("thread %d result %d = %d, want %d", tid, row, got, w.value)
			}
		}
	}
}

func TestVectorsAndSwizzles(t *testing.T) {
	d := openSim(t, sim.Options{})
	p := mustPipeline(t, d, features(t), "vectors")
	a := []float32{0.25, 0.75, -1, 2, 3, 0.1, 0.6, -0.5}
	pk := []float32{1, 2, 3, -4, 5, 0.5}
	out, _ := d.NewBuffer(4 * 4 * 4)
	bits, _ := d.NewBuffer(4 * 4 * 2)
	if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(2, 1),
		Args: []gpu.Arg{gpu.BufferArg(0, f32buf(t, d, a), 0), gpu.BufferArg(1, f32buf(t, d, pk), 0),
			gpu.BufferArg(2, out, 0), gpu.BufferArg(3, bits, 0)}}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		v := a[4*i : 4*i+4]
		w := []float32{v[1], v[0], v[2]*2 + 3, v[3]*2 + 4}
		q := pk[3*i : 3*i+3]
		want := []float32{w[2], w[3], q[0] + q[1] + q[2], min(max(v[0], 0), 1)}
		for c := range 4 {
			sel := float32(0)
			if v[c] > 0.5 {
				sel = w[c]
			}
			want = append(want, sel)
		}
		for k, wv := range want {
			if got := f32(out, 8*i+k); got != wv {
				t.Errorf("vector %d component %d = %g, want %g", i, k, got, wv)
			}
		}
		for k, wv := range []uint32{math.Float32bits(v[0]), 16, 12, 16} {
			if got := u32(bits, 4*i+k); got != wv {
				t.Errorf("bits %d[%d] = %d, want %d", i, k, got, wv)
			}
		}
	}
}

func TestAtomics(t *testing.T) {
	d := openSim(t, sim.Options{})
	p := mustPipeline(t, d, features(t), "atomics")
	const groups, threads = 3, 64
	counter, _ := d.NewBuffer(4)
	fsum, _ := d.NewBuffer(4)
	per, _ := d.NewBuffer(4 * groups)
	if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(groups, 1), Threads: size(threads, 1),
		Args: []gpu.Arg{gpu.BufferArg(0, counter, 0), gpu.BufferArg(1, fsum, 0), gpu.BufferArg(2, per, 0)}}); err != nil {
		t.Fatal(err)
	}
	if got := u32(counter, 0); got != groups*threads {
		t.Errorf("counter = %d, want %d", got, groups*threads)
	}
	if got := f32(fsum, 0); got != groups*threads*0.5 {
		t.Errorf("float sum = %g, want %g", got, groups*threads*0.5)
	}
	for g := range groups {
		if got := u32(per, g); got != threads*(threads-1)/2 {
			t.Errorf("group %d local sum = %d", g, got)
		}
	}
}

func TestFunctionConstants(t *testing.T) {
	d := openSim(t, sim.Options{})
	src := features(t)
	in := buffer(t, d, []uint32{1, 2, 3, 0xfffffffb}) // 1, 2, 3, -5
	run := func(cs ...gpu.Constant) []int32 {
		p := mustPipeline(t, d, src, "constants", cs...)
		out, _ := d.NewBuffer(16)
		if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(4, 1),
			Args: []gpu.Arg{gpu.BufferArg(0, in, 0), gpu.BufferArg(1, out, 0)}}); err != nil {
			t.Fatal(err)
		}
		r := make([]int32, 4)
		for i := range r {
			r[i] = int32(u32(out, i))
		}
		return r
	}
	if got, want := run(gpu.IntConstant(0, 3), gpu.BoolConstant(1, true)), []int32{4, 7, 10, -14}; !equal(got, want) {
		t.Errorf("scale 3, add one: %v, want %v", got, want)
	}
	if got, want := run(gpu.IntConstant(0, -2)), []int32{-2, -4, -6, 10}; !equal(got, want) {
		t.Errorf("scale -2, add undefined: %v, want %v", got, want)
	}
	if got, want := run(gpu.BoolConstant(1, false), gpu.IntConstant(0, 1)), []int32{1, 2, 3, -5}; !equal(got, want) {
		t.Errorf("scale 1, add false: %v, want %v", got, want)
	}
	a := mustPipeline(t, d, src, "constants", gpu.IntConstant(0, 3), gpu.BoolConstant(1, true))
	b := mustPipeline(t, d, src, "constants", gpu.BoolConstant(1, true), gpu.IntConstant(0, 3))
	if a != b {
		t.Error("the same constants in another order compiled a second pipeline")
	}
	for _, bad := range [][]gpu.Constant{
		{gpu.UintConstant(0, 3)},                       // declared int
		{gpu.IntConstant(7, 1)},                        // not declared
		{gpu.IntConstant(0, 1), gpu.IntConstant(0, 2)}, // twice
	} {
		if _, err := d.NewPipeline(src, "constants", bad...); err == nil {
			t.Errorf("constants %v accepted", bad)
		}
	}
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestThreadgroupMemoryAnd2DGrid(t *testing.T) {
	d := openSim(t, sim.Options{})
	p := mustPipeline(t, d, features(t), "reverse_2d")
	const gx, gy, tx, ty = 2, 3, 4, 2
	w, h := gx*tx, gy*ty
	x := make([]float32, w*h)
	for i := range x {
		x[i] = float32(i) + 0.5
	}
	y, _ := d.NewBuffer(4 * w * h)
	coords, _ := d.NewBuffer(4 * w * h)
	if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(gx, gy), Threads: size(tx, ty),
		Args:              []gpu.Arg{gpu.BufferArg(0, f32buf(t, d, x), 0), gpu.BufferArg(1, y, 0), gpu.BufferArg(2, coords, 0)},
		ThreadgroupMemory: []int{tx * ty * 4}}); err != nil {
		t.Fatal(err)
	}
	for gyi := range gy {
		for gxi := range gx {
			for ly := range ty {
				for lx := range tx {
					at := func(lx, ly int) int { return (gyi*ty+ly)*w + gxi*tx + lx }
					tl := ly*tx + lx
					mirror := tx*ty - 1 - tl
					g := at(lx, ly)
					if got, want := f32(y, g), x[at(mirror%tx, mirror/tx)]; got != want {
						t.Errorf("y at (%d,%d) = %g, want %g", gxi*tx+lx, gyi*ty+ly, got, want)
					}
					if got, want := u32(coords, g), uint32((gxi*tx+lx)*1000+gyi*ty+ly); got != want {
						t.Errorf("coords %d = %d, want %d", g, got, want)
					}
				}
			}
		}
	}
}

func TestCompileErrors(t *testing.T) {
	d := openSim(t, sim.Options{})
	cases := map[string]string{
		"local include":       "#include \"args.h\"\nkernel void k(device float* x [[buffer(0)]]) {}\n",
		"missing attribute":   "kernel void k(device float* x) {}\n",
		"unknown attribute":   "kernel void k(device float* x [[buffer(0)]], uint i [[sample_id]]) {}\n",
		"bad buffer index":    "kernel void k(device float* x [[buffer(40)]]) {}\n",
		"tg initializer":      "kernel void k(device float* x [[buffer(0)]]) { threadgroup float a = 1; }\n",
		"not a kernel":        "kernel int k(device float* x [[buffer(0)]]) { return 0; }\n",
		"c++ error, line two": "kernel void k(device float* x [[buffer(0)]]) {\n  x[0] = undefined_name;\n}\n",
	}
	for name, text := range cases {
		_, err := d.NewPipeline(gpu.Source{Name: "bad.metal", Text: text}, "k")
		if !errors.Is(err, gpu.ErrCompile) {
			t.Errorf("%s: got %v, want gpu.ErrCompile", name, err)
		}
	}
	_, err := d.NewPipeline(gpu.Source{Name: "bad.metal", Text: cases["c++ error, line two"]}, "k")
	if err == nil || !strings.Contains(err.Error(), "bad.metal:2") {
		t.Errorf("compiler error does not point at bad.metal:2: %v", err)
	}
	if _, err := d.NewPipeline(features(t), "no_such_kernel"); !errors.Is(err, gpu.ErrCompile) {
		t.Errorf("missing kernel: %v", err)
	}
}

func TestOptionalBuffer(t *testing.T) {
	d := openSim(t, sim.Options{})
	x := f32buf(t, d, []float32{1, 2})
	bias := f32buf(t, d, []float32{10, 20})
	for _, has := range []bool{true, false} {
		p := mustPipeline(t, d, features(t), "optional_bias", gpu.BoolConstant(2, has))
		y, _ := d.NewBuffer(8)
		args := []gpu.Arg{gpu.BufferArg(0, x, 0), gpu.BufferArg(2, y, 0)}
		if has {
			args = append(args, gpu.BufferArg(1, bias, 0))
		}
		if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(2, 1), Args: args}); err != nil {
			t.Fatal(err)
		}
		want := []float32{1, 2}
		if has {
			want = []float32{11, 22}
		}
		for i, w := range want {
			if got := f32(y, i); got != w {
				t.Errorf("bias=%v: y[%d] = %g, want %g", has, i, got, w)
			}
		}
	}
}

func TestMinMaxNaN(t *testing.T) {
	d := openSim(t, sim.Options{})
	p := mustPipeline(t, d, features(t), "minmax")
	nan := float32(math.NaN())
	a := []float32{1, nan, 3, -2, nan}
	b := []float32{2, 5, nan, -7, nan}
	out, _ := d.NewBuffer(4 * 4 * len(a))
	if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(len(a), 1),
		Args: []gpu.Arg{gpu.BufferArg(0, f32buf(t, d, a), 0), gpu.BufferArg(1, f32buf(t, d, b), 0), gpu.BufferArg(2, out, 0)}}); err != nil {
		t.Fatal(err)
	}
	for i := range a {
		lo, hi := float32(math.Min(float64(a[i]), float64(b[i]))), float32(math.Max(float64(a[i]), float64(b[i])))
		switch { // fmin/fmax: a NaN operand yields the other one
		case a[i] != a[i]:
			lo, hi = b[i], b[i]
		case b[i] != b[i]:
			lo, hi = a[i], a[i]
		}
		for k, want := range []float32{lo, hi, lo, hi} {
			got := f32(out, 4*i+k)
			if got != want && !(got != got && want != want) {
				t.Errorf("case %d result %d = %g, want %g", i, k, got, want)
			}
		}
	}
}

// TestInactiveLaneReads: a shuffle from a lane the simd-group lacks is
// undefined on the GPU; the sim returns poison, so the race check reports a
// result that depends on it, and a full simd-group passes.
func TestInactiveLaneReads(t *testing.T) {
	d := openSim(t, sim.Options{})
	p := mustPipeline(t, d, features(t), "shuffle_sum")
	for _, n := range []int{32, 20} {
		x := make([]float32, n)
		for i := range x {
			x[i] = 1
		}
		out, _ := d.NewBuffer(4)
		err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(n, 1),
			Args: []gpu.Arg{gpu.BufferArg(0, f32buf(t, d, x), 0), gpu.BufferArg(1, out, 0)}})
		switch {
		case n == 32 && (err != nil || f32(out, 0) != 32):
			t.Errorf("full simd-group: %v, sum %g", err, f32(out, 0))
		case n < 32 && !errors.Is(err, sim.ErrRace):
			t.Errorf("%d lanes: got %v, want sim.ErrRace", n, err)
		}
	}
}

func TestMathFunctions(t *testing.T) {
	d := openSim(t, sim.Options{})
	p := mustPipeline(t, d, features(t), "math_funcs")
	x := []float32{0.5, 1, 2.25, 7}
	out, _ := d.NewBuffer(4 * 10 * len(x))
	if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(len(x), 1),
		Args: []gpu.Arg{gpu.BufferArg(0, f32buf(t, d, x), 0), gpu.BufferArg(1, out, 0)}}); err != nil {
		t.Fatal(err)
	}
	for i, xv := range x {
		v := float64(xv)
		want := []float64{math.Exp(v), math.Exp(v), math.Exp(v), 1 / math.Sqrt(v), v*v + 1, math.Sqrt(v),
			math.Tanh(v), math.Log(v), math.Pow(v, 1.5), 2}
		for k, w := range want {
			// libm's float functions are within a few ulp: 1e-6 relative.
			if got := float64(f32(out, 10*i+k)); math.Abs(got-w) > 1e-6*math.Abs(w) {
				t.Errorf("x=%g result %d = %g, want %g", v, k, got, w)
			}
		}
	}
}
