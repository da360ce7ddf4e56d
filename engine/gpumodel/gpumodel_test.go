package gpumodel

import (
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/cpu"
	"petal/engine/reftest"
	"petal/gpu"
	"petal/gpu/gputest"
	"petal/gpu/record"
)

const fixturesDir = "../testdata/fixtures"

// Tolerances of the whole model on the sim.
//
// Against the CPU backend with its KV cache rounded to half precision as
// the GPU stores it (maxLogitDiff): both compute in fp32 but reduce in
// other orders (simd-group trees, online softmax, per-column DeltaNet
// sums), which moved logits of magnitude ~25 by at most 9e-4.
//
// Against transformers, which keeps K and V in fp32 (maxRefDiff): each
// cached K and V element moves by up to 2^-11 of itself, which moved the
// logits of tiny-a and real-heads by at most 0.0025; in flat-8layer it
// swaps two experts of layer 6's router at position 1 whose logits are
// 0.0022 apart, and logits there move by 0.106 (by up to 0.022 at later
// positions). maxRefDiff admits one such swap of a near-tied expert,
// under issue 3's bound of 0.15; the top-1 check holds wherever the
// reference is decisive, and maxLogitDiff holds the kernels to the CPU.
const (
	maxLogitDiff = 0.01
	maxRefDiff   = 0.12
	// A top-1 disagreement is only an error where the reference's top-2
	// margin exceeds this.
	decisiveMargin = 0.05
)

// openDevice opens the GPU the tests run whole models on (the sim, or
// the one PETAL_GPU names); under -short those runs are skipped (minutes
// of CI on the sim), scripts/test.sh runs them.
func openDevice(t testing.TB) gpu.Device {
	t.Helper()
	if testing.Short() {
		t.Skip("runs whole models on the GPU: go test without -short runs it")
	}
	return gputest.Open(t, true)
}

func openFixture(t testing.TB, dev gpu.Device, name string) *Model {
	t.Helper()
	m, err := Open(filepath.Join(fixturesDir, name), dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// openShapeOnly is a model of cfg's shape, without its weights, on the
// recording driver, closed when t ends.
func openShapeOnly(t testing.TB, cfg *checkpoint.Config) *Model {
	t.Helper()
	m, err := newShapeOnly(cfg, record.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// fixtureDirs is every fixture's directory (each holds a reference.json);
// none is a failure.
func fixtureDirs(t *testing.T) []string {
	t.Helper()
	refs, _ := filepath.Glob(filepath.Join(fixturesDir, "*", "reference.json"))
	if len(refs) == 0 {
		t.Fatal("no fixtures")
	}
	dirs := make([]string, len(refs))
	for i, p := range refs {
		dirs[i] = filepath.Dir(p)
	}
	return dirs
}

// loadReference reads the fixture in dir and its logits.
func loadReference(t *testing.T, dir string) (*reftest.Reference, []float32) {
	t.Helper()
	r, err := reftest.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r, r.Logits
}

func topTwo(v []float32) (int, float32) {
	best, second := 0, -1
	for i := 1; i < len(v); i++ {
		switch {
		case v[i] > v[best]:
			best, second = i, best
		case second < 0 || v[i] > v[second]:
			second = i
		}
	}
	return best, v[best] - v[second]
}

// TestFixtures runs every fixture through the GPU path on the sim:
// teacher-forced logits at every position, and greedy continuations with
// the argmax on the GPU and two steps in flight.
func TestFixtures(t *testing.T) {
	dev := openDevice(t)
	for _, dir := range fixtureDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ref, want := loadReference(t, dir)
			m := openFixture(t, dev, filepath.Base(dir))
			v := m.cfg.Vocab
			seq, _ := m.NewSequence()
			defer seq.Close()
			got := make([]float32, len(ref.Tokens)*v)
			if err := seq.Forward(ref.Tokens, got); err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for pos := range ref.Tokens {
				g, w := got[pos*v:(pos+1)*v], want[pos*v:(pos+1)*v]
				for i := range g {
					worst = max(worst, math.Abs(float64(g[i]-w[i])))
				}
				if top, margin := topTwo(w); margin > decisiveMargin {
					if gt, _ := topTwo(g); gt != top {
						t.Errorf("position %d: top-1 %d, reference %d (margin %.3f)", pos, gt, top, margin)
					}
				}
			}
			t.Logf("max |logit - reference| = %.3g over %d positions", worst, len(ref.Tokens))
			if worst > maxRefDiff {
				t.Errorf("max |logit - reference| = %g, tolerance %g", worst, maxRefDiff)
			}
			c, err := cpu.OpenWith(dir, cpu.Options{HalfKV: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cs, _ := c.NewSequence()
			cpuLogits := make([]float32, len(got))
			if err := cs.Forward(ref.Tokens, cpuLogits); err != nil {
				t.Fatal(err)
			}
			cs.Close()
			worstCPU := 0.0
			for i := range got {
				worstCPU = max(worstCPU, math.Abs(float64(got[i]-cpuLogits[i])))
			}
			t.Logf("max |logit - CPU with a half-precision KV cache| = %.3g", worstCPU)
			if worstCPU > maxLogitDiff {
				t.Errorf("max |logit - CPU with a half-precision KV cache| = %g, tolerance %g", worstCPU, maxLogitDiff)
			}
			for _, g := range ref.Greedy {
				s, _ := m.NewSequence()
				out, err := engine.Greedy(t.Context(), s, v, g.Prompt, len(g.Tokens), nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(out, g.Tokens) {
					t.Errorf("greedy from %d tokens:\n got %v\nwant %v", len(g.Prompt), out, g.Tokens)
				}
				if s.Len() < len(g.Prompt)+len(out)-1 {
					t.Errorf("sequence holds %d tokens after greedy", s.Len())
				}
				s.Close()
			}
		})
	}
}

// openTinyA opens tiny-a on the sim and on the CPU backend with its KV
// cache in half precision, as the GPU keeps it.
func openTinyA(t *testing.T) (*Model, *cpu.Model) {
	t.Helper()
	m := openFixture(t, openDevice(t), "tiny-a")
	c, err := cpu.OpenWith(filepath.Join(fixturesDir, "tiny-a"), cpu.Options{HalfKV: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return m, c
}

// The GPU path against the CPU backend on the same checkpoint, split
// prefills and forks included.
func TestMatchesCPU(t *testing.T) {
	m, c := openTinyA(t)
	v := m.cfg.Vocab
	ids := []int{5, 17, 300, 2, 9, 44, 1, 260, 77, 3}
	cs, _ := c.NewSequence()
	want := make([]float32, len(ids)*v)
	cs.Forward(ids, want)

	gs, _ := m.NewSequence()
	defer gs.Close()
	if err := gs.Forward(ids[:4], nil); err != nil {
		t.Fatal(err)
	}
	fork, err := gs.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer fork.Close()
	for _, s := range []engine.Sequence{gs, fork} {
		got := make([]float32, (len(ids)-4)*v)
		if err := s.Forward(ids[4:], got); err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for i := range got {
			worst = max(worst, math.Abs(float64(got[i]-want[4*v+i])))
		}
		if worst > maxLogitDiff {
			t.Errorf("GPU vs CPU: max diff %g", worst)
		}
	}
	last := make([]float32, v)
	if err := gs.Forward([]int{9999}, last); err == nil {
		t.Error("accepted a token outside the vocabulary")
	}
}

// The reference engine's recorded decode step (SEED.md), which fusion
// must stay under.
const (
	referenceDispatches = 795
	referenceLevels     = 555
)

// The step issue 15 asks for: under 400 dispatches in under 300 levels,
// at the first position and at 32K.
const (
	maxDispatches = 400
	maxLevels     = 300
)

// The 35B shape, counted without weights, at the first position, before
// and past the attention's split into blocks.
func TestDryRun35B(t *testing.T) {
	cfg := checkpoint.Qwen36()
	for _, pos := range []int{0, 4096, 32768} {
		r, err := DryRun(cfg, pos)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("35B decode step at %d: %d dispatches, %d levels, %d weight bytes", pos, r.Dispatches, r.Levels, r.WeightBytes)
		if r.Levels >= r.Dispatches || r.Levels < 40*4 {
			t.Errorf("%d levels for %d dispatches: barriers missing or everywhere", r.Levels, r.Dispatches)
		}
		if r.Dispatches >= referenceDispatches || r.Levels >= referenceLevels {
			t.Errorf("%d dispatches in %d levels: not under the reference's %d in %d", r.Dispatches, r.Levels, referenceDispatches, referenceLevels)
		}
		if r.Dispatches >= maxDispatches || r.Levels >= maxLevels {
			t.Errorf("%d dispatches in %d levels: want under %d in under %d", r.Dispatches, r.Levels, maxDispatches, maxLevels)
		}
		if r.WeightBytes < 1.6e9 || r.WeightBytes > 1.72e9 {
			t.Errorf("weight bytes %d", r.WeightBytes)
		}
	}
}

// A model whose mixer shapes the kernels cannot run is refused when it is
// placed on the device, naming the dimension, not at its first prompt.
func TestNewRefusesUnsupportedShapes(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*checkpoint.Config)
		want string
	}{
		"DeltaNet key dim 12":   {func(c *checkpoint.Config) { c.LinearKeyDim = 12 }, "key dim 12"},
		"DeltaNet key dim 256":  {func(c *checkpoint.Config) { c.LinearKeyDim = 256 }, "key dim 256"},
		"attention head dim 48": {func(c *checkpoint.Config) { c.HeadDim, c.RotaryDim = 48, 16 }, "head dim 48"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := checkpoint.Qwen36()
			tc.edit(cfg)
			ckpt, err := checkpoint.ShapeOnly(cfg)
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(ckpt, record.New())
			if err == nil {
				m.Close()
				t.Fatal("accepted")
			}
			if !errors.Is(err, gpu.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want gpu.ErrInvalid naming %q", err, tc.want)
			}
		})
	}
	ckpt, err := checkpoint.ShapeOnly(checkpoint.Qwen36())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(ckpt, record.New())
	if err != nil {
		t.Fatalf("the 35B shape: %v", err)
	}
	m.Close()
}
