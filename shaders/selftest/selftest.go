// Package selftest holds a self-test case for every kernel in petal/shaders:
// inputs drawn from a fixed seed, the ops that run them, and a float64 Go
// reference with the tolerance the kernel must meet. It is ordinary code,
// not a test file, so `petal doctor` runs the same cases on whatever device
// it opens (the Mac's GPU, or the sim), and tests run them on the sim.
package selftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"petal/gpu"
	"petal/shaders"
)

// Case is one self-test.
type Case struct {
	Name string
	// Kernels are the kernel functions the case dispatches.
	Kernels []string
	setup   func(e *env) (encode func(cb gpu.CommandBuffer) error, check func() error)
	// bench, when set, sets the kernels up at the model's size for timing
	// only: the checked shapes are small, so on a GPU their time is the
	// launch, not the memory traffic.
	bench func(e *env) func(cb gpu.CommandBuffer) error
	seed  uint64
}

// Run is a case set up on a device and run once.
type Run struct {
	// Bytes is the size of every buffer the case binds: what its
	// dispatches read and write, each byte counted once.
	Bytes  int64
	dev    gpu.Device
	encode func(cb gpu.CommandBuffer) error
}

// Run uploads c's inputs to k's device, runs the case once and compares
// its outputs with the reference. The error says which output element is
// off and by how much, or carries the device's compile or execution error.
func (c Case) Run(k *shaders.Kernels) (*Run, error) {
	e := &env{k: k, rng: rand.New(rand.NewPCG(c.seed, uint64(len(c.Name))))}
	encode, check := c.setup(e)
	if e.err != nil {
		return nil, e.err
	}
	r := &Run{Bytes: e.bytes, dev: k.Device(), encode: encode}
	if err := r.once(); err != nil {
		return nil, err
	}
	return r, check()
}

// Bench sets c up at the model's size on k's device for [Run.Time]; nothing
// is compared. It returns nil for a case timed at its checked shape.
func (c Case) Bench(k *shaders.Kernels) (*Run, error) {
	if c.bench == nil {
		return nil, nil
	}
	e := &env{k: k, rng: rand.New(rand.NewPCG(c.seed, 1))}
	encode := c.bench(e)
	if e.err != nil {
		return nil, e.err
	}
	return &Run{Bytes: e.bytes, dev: k.Device(), encode: encode}, nil
}

// Time runs the case reps more times, one command buffer each, and
// returns the fastest run's wall time from encoding to completion. Runs
// after the first see the outputs of the one before (states advance,
// caches fill), which changes values, not the work.
func (r *Run) Time(reps int) (time.Duration, error) {
	best := time.Duration(math.MaxInt64)
	for range reps {
		start := time.Now()
		if err := r.once(); err != nil {
			return 0, err
		}
		best = min(best, time.Since(start))
	}
	return best, nil
}

func (r *Run) once() error {
	cb, err := r.dev.NewCommandBuffer()
	if err != nil {
		return err
	}
	if err := r.encode(cb); err != nil {
		return err
	}
	if err := cb.Commit(); err != nil {
		return err
	}
	return cb.Wait()
}

// env allocates a case's buffers on the device and counts their bytes.
// After the first failure it hands out empty views and keeps the error.
type env struct {
	k     *shaders.Kernels
	rng   *rand.Rand
	bytes int64
	err   error
}

func (e *env) buf(n int) shaders.View {
	if e.err != nil {
		return shaders.View{}
	}
	b, err := e.k.Device().NewBuffer(max(n, 4))
	if err != nil {
		e.err = fmt.Errorf("selftest: allocating %d bytes: %w", n, err)
		return shaders.View{}
	}
	e.bytes += int64(n)
	return shaders.View{Buf: b}
}

func (e *env) f32(v []float32) shaders.View {
	b := e.buf(4 * len(v))
	if b.Buf != nil {
		for i, x := range v {
			binary.LittleEndian.PutUint32(b.Buf.Contents()[4*i:], math.Float32bits(x))
		}
	}
	return b
}

func (e *env) u32(v []uint32) shaders.View {
	b := e.buf(4 * len(v))
	if b.Buf != nil {
		for i, x := range v {
			binary.LittleEndian.PutUint32(b.Buf.Contents()[4*i:], x)
		}
	}
	return b
}

func (e *env) u16(v []uint16) shaders.View {
	b := e.buf(2 * len(v))
	if b.Buf != nil {
		for i, x := range v {
			binary.LittleEndian.PutUint16(b.Buf.Contents()[2*i:], x)
		}
	}
	return b
}

// half is a buffer of v rounded to fp16.
func (e *env) half(v []float32) shaders.View {
	h := make([]uint16, len(v))
	for i, x := range v {
		h[i] = HalfBits(x)
	}
	return e.u16(h)
}

// rand is n normal draws of standard deviation sd.
func (e *env) rand(n int, sd float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(e.rng.NormFloat64() * sd)
	}
	return v
}

func readF32(v shaders.View, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(v.Buf.Contents()[v.Off+4*i:]))
	}
	return out
}

func readU32(v shaders.View, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(v.Buf.Contents()[v.Off+4*i:])
	}
	return out
}

func readHalf(v shaders.View, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = HalfValue(binary.LittleEndian.Uint16(v.Buf.Contents()[v.Off+2*i:]))
	}
	return out
}

// ErrMismatch marks a kernel output outside its tolerance.
var ErrMismatch = errors.New("selftest: output differs from the Go reference")

// compare checks got[i] against want[i] within tol(i); NaN matches
// nothing.
func compare(what string, got []float32, want []float64, tol func(i int) float64) error {
	for i, w := range want {
		g := float64(got[i])
		if t := tol(i); !(math.Abs(g-w) <= t) {
			return fmt.Errorf("%w: %s[%d] = %v, want %v (tolerance %.3g)", ErrMismatch, what, i, g, w, t)
		}
	}
	return nil
}

// widen is v in float64.
func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// relTol is a tolerance of rel times (1 + |want|).
func relTol(want []float64, rel float64) func(int) float64 {
	return func(i int) float64 { return rel * (1 + math.Abs(want[i])) }
}
