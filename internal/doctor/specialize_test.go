package doctor

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
	"petal/shaders"
)

// probeKernel writes out what its function constants hold, so a file
// Specialize wrote can be run against the driver's own specialization.
const probeKernel = `#include <metal_stdlib>
using namespace metal;

#define FC_PROBE 900

constant int SIZE [[function_constant(FC_PROBE + 0)]];
constant float SCALE [[function_constant(FC_PROBE + 1)]];
constant bool FLAG [[function_constant(FC_PROBE + 2)]];
constant uint COUNT [[function_constant(FC_PROBE + 3)]];

kernel void probe(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    if (i != 0) {
        return;
    }
    out[0] = float(SIZE);
    out[1] = SCALE;
    out[2] = FLAG ? 1.0f : 0.0f;
    out[3] = is_function_constant_defined(COUNT) ? float(COUNT) : -1.0f;
}
`

const probeOutputs = 4

// runProbe compiles text's probe kernel with cs and returns what it wrote.
func runProbe(t *testing.T, dev gpu.Device, name, text string, cs []gpu.Constant) []float32 {
	t.Helper()
	p, err := dev.NewPipeline(gpu.Source{Name: name, Text: text}, "probe", cs...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out, err := dev.NewBuffer(4 * probeOutputs)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	cb, err := dev.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	one := gpu.Size{X: 1, Y: 1, Z: 1}
	if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: one, Threads: one, Args: []gpu.Arg{gpu.BufferArg(0, out, 0)}}); err != nil {
		t.Fatal(err)
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, probeOutputs)
	for i := range got {
		got[i] = math.Float32frombits(binary.LittleEndian.Uint32(out.Contents()[4*i:]))
	}
	return got
}

// A specialized copy, compiled without constants, computes what the
// driver's specialization of the original computes: every type, an index
// written through a macro, a constant the set leaves undefined (which
// is_function_constant_defined must see), and a float that only an exact
// literal keeps.
func TestSpecializedCopyMatchesTheDriver(t *testing.T) {
	dev, err := sim.Open(sim.Options{Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, cs := range [][]gpu.Constant{
		{gpu.IntConstant(900, -3), gpu.FloatConstant(901, float32(1)/3), gpu.BoolConstant(902, true)},
		{gpu.IntConstant(900, 4096), gpu.FloatConstant(901, -2.5e-8), gpu.BoolConstant(902, false), gpu.UintConstant(903, 7)},
	} {
		text, err := specialize(probeKernel, cs)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(text, "[[function_constant") {
			t.Fatalf("a function constant is left:\n%s", text)
		}
		label := constantsLabel(cs)
		want := runProbe(t, dev, "probe.metal", probeKernel, cs)
		got := runProbe(t, dev, "probe"+label+".metal", text, nil)
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: output %d is %v specialized, %v through the driver", label, i, got[i], want[i])
			}
		}
		if want[1] != math.Float32frombits(cs[1].Bits) {
			t.Errorf("%s: the driver's SCALE is %v", label, want[1])
		}
	}
}

// Infinity and NaN have no MSL literal: refused, naming the constant.
func TestSpecializeRefusesNonFiniteFloats(t *testing.T) {
	for _, f := range []float32{float32(math.Inf(-1)), float32(math.NaN())} {
		_, err := specialize(probeKernel, []gpu.Constant{gpu.FloatConstant(901, f)})
		if err == nil || !strings.Contains(err.Error(), "function constant 901") {
			t.Errorf("%v: %v", f, err)
		}
	}
}

// Specialize writes every embedded kernel file, once per constant set the
// ops use where its kernels take constants, and every copy compiles (here
// through the sim's Apple rules) with no constants given.
func TestSpecializeEmbeddedKernels(t *testing.T) {
	dir := t.TempDir()
	written, err := Specialize(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	byFile := map[string][]Specialized{}
	for _, s := range written {
		byFile[s.Source] = append(byFile[s.Source], s)
	}
	dev, err := sim.Open(sim.Options{Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	specialized := 0
	for _, file := range shaders.Names() {
		orig, err := shaders.Source(file)
		if err != nil {
			t.Fatal(err)
		}
		copies := byFile[file]
		takesConstants := strings.Contains(orig, "[[function_constant(")
		switch {
		case len(copies) == 0:
			t.Errorf("%s not written", file)
		case !takesConstants && (len(copies) != 1 || copies[0].Constants != "" || filepath.Base(copies[0].Path) != file):
			t.Errorf("%s takes no constants, written as %+v", file, copies)
		}
		labels := map[string]bool{}
		for _, c := range copies {
			b, err := os.ReadFile(c.Path)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			if !takesConstants {
				if text != orig {
					t.Errorf("%s: written changed", file)
				}
				continue
			}
			specialized++
			if c.Constants == "" || labels[c.Constants] {
				t.Errorf("%s: copy %s has set %q, empty or twice", file, c.Path, c.Constants)
			}
			labels[c.Constants] = true
			if strings.Contains(text, "[[function_constant") {
				t.Errorf("%s: a function constant is left", c.Path)
			}
			for _, fn := range kernelFunctions(text) {
				if _, err := dev.NewPipeline(gpu.Source{Name: filepath.Base(c.Path), Text: text}, fn); err != nil {
					t.Errorf("%s%s: %v", fn, c.Constants, err)
				}
			}
		}
	}
	if specialized == 0 {
		t.Error("no file was specialized")
	}
}
