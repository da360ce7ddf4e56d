package sim_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
)

// TestAppleRulesRefuseMutants compiles, for each rule the sim enforces, a
// copy of a real kernel mutated to break it: NewPipeline must fail with a
// RuleError for that rule at the mutated line, while the unmutated copy
// compiles.
func TestAppleRulesRefuseMutants(t *testing.T) {
	cases := []struct {
		mutant, real, fn string
		rule             sim.Rule
		at               string // text on the line the error must name
		says             string // and what its detail must say, where given
	}{
		{"rule_input_shape.metal", "rmsnorm.metal", "rmsnorm_f32_bf16", sim.RuleInputShape, "uint threads [[threads_per_threadgroup]]", ""},
		{"rule_input_type.metal", "argmax.metal", "argmax_f32", sim.RuleInputType, "int tid [[thread_index_in_threadgroup]]", ""},
		{"rule_address_space.metal", "rmsnorm.metal", "rmsnorm_f32_bf16", sim.RuleAddressSpace, "const float* xr", ""},
		{"rule_address_space_mix.metal", "rmsnorm.metal", "rmsnorm_f32_bf16", sim.RuleAddressSpaceMix, "device float* sums = partial;", ""},
		{"rule_program_scope.metal", "rmsnorm.metal", "rmsnorm_f32_bf16", sim.RuleProgramScope, "const float min_scale", ""},
		{"rule_double.metal", "argmax.metal", "argmax_f32", sim.RuleDouble, "double xi", ""},
		{"rule_recursion.metal", "qmv.metal", "qmv_bf16_gs64_b4", sim.RuleRecursion, "static float lane_sum", ""},
		{"rule_function_pointer.metal", "qmv.metal", "qmv_bf16_gs64_b4", sim.RuleFunctionPointer, "float (*reduce)(float)", ""},
		{"rule_exceptions.metal", "argmax.metal", "argmax_f32", sim.RuleExceptions, "throw args.n;", ""},
		{"rule_library.metal", "qmv.metal", "qmv_bf16_gs64_b4", sim.RuleLibrary, "std::array", ""},
		{"rule_unsupported.metal", "qmv.metal", "qmv_bf16_gs64_b4", sim.RuleUnsupported, "goto next;", ""},
		{"rule_cxx14.metal", "rmsnorm.metal", "rmsnorm_f32_bf16", sim.RuleCxx14, "if constexpr", ""},
		// The mutant is deltanet.metal as it was before issue 27: the
		// partial sums declared in the helper delta_step.
		{"rule_threadgroup_scope.metal", "deltanet.metal", "delta_step_conv_f32", sim.RuleThreadgroupScope,
			"threadgroup float part_q[DELTA_MAX_SIMDGROUPS];", "threadgroup part_q in delta_step, which is not a kernel"},
		{"rule_foreign_name.metal", "rmsnorm.metal", "rmsnorm_f32_bf16", sim.RuleForeignName, "sqrtf(total", "sqrtf is the C library's"},
		{"rule_atomic.metal", "argmax.metal", "argmax_f32", sim.RuleAtomic, "atomic<ulong> best_index", "atomic<ulong>"},
	}
	d := openSim(t, sim.Options{})
	seen := map[sim.Rule]bool{}
	for _, c := range cases {
		seen[c.rule] = true
		t.Run(c.mutant, func(t *testing.T) {
			realSrc := testdataSource(t, c.real)
			mut := testdataSource(t, c.mutant)
			if n := changedLines(realSrc.Text, mut.Text); n == 0 || n > maxMutatedLines {
				t.Fatalf("%s differs from %s in %d lines; want 1..%d", c.mutant, c.real, n, maxMutatedLines)
			}
			if _, err := d.NewPipeline(realSrc, c.fn); err != nil {
				t.Fatalf("real kernel %s: %v", c.real, err)
			}
			_, err := d.NewPipeline(mut, c.fn)
			var re *sim.RuleError
			if !errors.As(err, &re) || !errors.Is(err, gpu.ErrCompile) {
				t.Fatalf("got %v, want a RuleError wrapped with gpu.ErrCompile", err)
			}
			line := lineOf(t, mut.Text, c.at)
			if re.Rule != c.rule || re.File != c.mutant || re.Line != line {
				t.Fatalf("got %s:%d %q, want %s:%d %q", re.File, re.Line, re.Rule, c.mutant, line, c.rule)
			}
			if want := fmt.Sprintf("%s:%d: %s", c.mutant, line, c.rule); !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
			if !strings.Contains(re.Detail, c.says) {
				t.Fatalf("detail %q does not say %q", re.Detail, c.says)
			}
			t.Log(err)
		})
	}
	for _, r := range sim.Rules() {
		if !seen[r] {
			t.Errorf("rule %q has no mutant", r)
		}
	}
}

// lineOf is the 1-based line of the only line of src containing s.
func lineOf(t *testing.T, src, s string) int {
	t.Helper()
	found := 0
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, s) {
			if found != 0 {
				t.Fatalf("%q is on lines %d and %d", s, found, i+1)
			}
			found = i + 1
		}
	}
	if found == 0 {
		t.Fatalf("%q is not in the source", s)
	}
	return found
}

// TestRuleErrorsFollowLineDirectives: petal/shaders expands includes with
// #line, so a rule broken in an included file names that file and line.
func TestRuleErrorsFollowLineDirectives(t *testing.T) {
	src := "#include <metal_stdlib>\n#line 1 \"args.h\"\nstruct Args {\n    int n;\n    float* p;\n};\n#line 3 \"k.metal\"\n" +
		"kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 1.0f; }\n"
	_, err := openSim(t, sim.Options{}).NewPipeline(gpu.Source{Name: "k.metal", Text: src}, "k")
	var re *sim.RuleError
	if !errors.As(err, &re) || re.File != "args.h" || re.Line != 3 || re.Rule != sim.RuleAddressSpace {
		t.Fatalf("got %v, want args.h:3: %s", err, sim.RuleAddressSpace)
	}
}

// TestAppleRulesAcceptValidMSL holds the checks to MSL they must let
// through: pointers and references in every address space (threadgroup ones
// in a helper too), casts between them, expressions that look like
// declarations, deleted members, templates, a kernel behind an attribute,
// 32-bit atomics and a static constexpr local.
func TestAppleRulesAcceptValidMSL(t *testing.T) {
	src := `#include <metal_stdlib>
using namespace metal;
struct Pair { float a; float b; Pair() = default; float operator[](int j) const { return j == 0 ? a : b; } };
constant float half_pi = 1.5707964f;
constexpr constant int lanes = 32;
template <typename T> T twice(thread const T& v) { return v + v; }
static float first(device const float* p, threadgroup float* s) { threadgroup float& s0 = s[0]; s0 = p[0]; return s0; }
[[max_total_threads_per_threadgroup(1024)]]
kernel void ok(device float* x [[buffer(0)]], constant Pair& pr [[buffer(1)]],
               uint2 gid [[thread_position_in_grid]], uint2 size [[threads_per_grid]],
               ushort lane [[thread_index_in_simdgroup]]) {
    threadgroup float tg[32];
    threadgroup atomic<unsigned int> count;
    static constexpr constant float third = 1.0f / 3.0f;
    const uint i = gid.y * size.x + gid.x;
    thread float local = x[i] * pr.a;
    thread float& ref = local;
    device float* p = x + i;
    threadgroup float* t = &tg[lane];
    device float* q = (device float*)(x);
    float y = float(i) * 0.5 + sizeof(float) * 2 + x[size.x - 1];
    *t = twice(ref) + first(p, tg) + q[0] * y + half_pi * float(lanes);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[i] = tg[lane];
}
`
	d := openSim(t, sim.Options{})
	if _, err := d.NewPipeline(gpu.Source{Name: "ok.metal", Text: src}, "ok"); err != nil {
		t.Fatal(err)
	}
}

// TestAppleRulesRefuseSnippets covers what the mutants do not: each line,
// placed in a small kernel, breaks the rule given and the error names it.
func TestAppleRulesRefuseSnippets(t *testing.T) {
	d := openSim(t, sim.Options{})
	for _, c := range []struct {
		line string
		rule sim.Rule
		says string
	}{
		{"x[i] = expf(x[i]);", sim.RuleForeignName, "expf is the C library's"},
		{"printf(\"%f\", x[i]);", sim.RuleForeignName, "printf is the C library's"},
		{"x[threadIdx.x] = 0.0f;", sim.RuleForeignName, "threadIdx is CUDA's"},
		{"atomicAdd(&x[0], 1.0f);", sim.RuleForeignName, "atomicAdd is CUDA's"},
		{"__syncthreads();", sim.RuleForeignName, "__syncthreads is reserved"},
		{"x[i] = __builtin_sqrtf(x[i]);", sim.RuleForeignName, "__builtin_sqrtf is reserved"},
		{"threadgroup atomic_ulong n;", sim.RuleAtomic, "atomic_ulong"},
		{"threadgroup atomic<long> n;", sim.RuleAtomic, "atomic<long>"},
		{"threadgroup atomic<half> n;", sim.RuleAtomic, "atomic<half>"},
		{"static float total = 0.0f; total += x[i];", sim.RuleProgramScope, "static local total"},
		{"static int seen[4];", sim.RuleProgramScope, "static local seen"},
		{"auto twice = [&](float v) { return 2.0f * v; }; x[i] = twice(x[i]);", sim.RuleUnsupported, "a lambda"},
		{"x[i] = [](float v) { return v; }(x[i]);", sim.RuleUnsupported, "a lambda"},
		{"const float c = 2.0f; auto f = [c](float v) { return c * v; }; x[i] = f(x[i]);", sim.RuleUnsupported, "a lambda"},
		{"}\nstatic void main(device float* x) { x[0] = 0.0f; ", sim.RuleUnsupported, "a function named main"},
		{"if (i == 0) { threadgroup float t[4]; t[0] = 1.0f; x[0] = t[0]; }", sim.RuleThreadgroupScope, "threadgroup t in a block inside kernel k"},
		{"}\nstruct Tile { float first() { threadgroup float t[4]; return t[0]; } float f; ", sim.RuleThreadgroupScope, "threadgroup t in first"},
	} {
		src := "#include <metal_stdlib>\nusing namespace metal;\n" +
			"kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n    " + c.line + "\n}\n"
		_, err := d.NewPipeline(gpu.Source{Name: "k.metal", Text: src}, "k")
		line := 4 + strings.Count(c.line, "\n")
		var re *sim.RuleError
		if !errors.As(err, &re) || re.Rule != c.rule || re.Line != line || !strings.Contains(re.Detail, c.says) {
			t.Errorf("%s: got %v, want k.metal:%d: %s: ...%s...", c.line, err, line, c.rule, c.says)
		}
	}
}
