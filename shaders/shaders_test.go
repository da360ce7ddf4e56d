package shaders_test

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"petal/gpu"
	"petal/gpu/gputest"
	"petal/shaders"
)

// device opens a race-checking sim device for t (or the CUDA GPU, see
// petal/gpu/gputest); the sim's library cache is shared with later runs
// through PETAL_SIM_CACHE or the user cache.
func device(t testing.TB) gpu.Device {
	t.Helper()
	return gputest.Open(t, false)
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

// checkLayout compiles args.h, and the headers named after want, with the
// sim into a kernel that writes values, a comma-separated list of C++
// expressions over their structs and constants (OFF(s, f) for a field's
// offset), and compares each with want.
func checkLayout(t *testing.T, d gpu.Device, values string, want []uintptr, headers ...string) {
	t.Helper()
	includes := `#include "args.h"` + "\n"
	for _, h := range headers {
		includes += `#include "` + h + `"` + "\n"
	}
	probe := `#include <metal_stdlib>
` + includes + `using namespace metal;
#define OFF(s, f) (uint)__builtin_offsetof(s, f)
kernel void layout(device uint* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    if (tid != 0) return;
    uint v[] = {
` + values + `    };
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

// TestArgsLayout compiles args.h with the sim and compares every struct's
// size and field offsets, and the shared constants, with the Go mirrors.
func TestArgsLayout(t *testing.T) {
	d := device(t)
	const values = `
        sizeof(RMSNormArgs), OFF(RMSNormArgs, n), OFF(RMSNormArgs, eps), OFF(RMSNormArgs, weight_offset), OFF(RMSNormArgs, row_stride),
        sizeof(QMVArgs), OFF(QMVArgs, rows), OFF(QMVArgs, k), OFF(QMVArgs, experts),
        sizeof(MoEArgs), OFF(MoEArgs, n), OFF(MoEArgs, k), OFF(MoEArgs, normalize),
        sizeof(ArgmaxArgs), OFF(ArgmaxArgs, n), OFF(ArgmaxArgs, out_index),
        RMSNORM_MAX_SIMDGROUPS, QMV_ROWS, QMV_SIMDGROUPS, QMV_GROUP_SIZE, QMV_WORDS_PER_LANE, ARGMAX_MAX_SIMDGROUPS,
        MOE_MAX_EXPERTS, MOE_MAX_TOPK, ARGMAX_UNROLL,
        sizeof(AttnPrepArgs), OFF(AttnPrepArgs, heads), OFF(AttnPrepArgs, kv_heads), OFF(AttnPrepArgs, head_dim), OFF(AttnPrepArgs, rotary_dim), OFF(AttnPrepArgs, pos), OFF(AttnPrepArgs, eps), OFF(AttnPrepArgs, inv_freq),
        sizeof(AttnDecodeArgs), OFF(AttnDecodeArgs, n), OFF(AttnDecodeArgs, parts), OFF(AttnDecodeArgs, heads), OFF(AttnDecodeArgs, kv_heads), OFF(AttnDecodeArgs, scale), OFF(AttnDecodeArgs, part_len),
        sizeof(DeltaConvArgs), OFF(DeltaConvArgs, channels), OFF(DeltaConvArgs, taps),
        sizeof(DeltaStepArgs), OFF(DeltaStepArgs, key_heads), OFF(DeltaStepArgs, value_heads), OFF(DeltaStepArgs, value_dim), OFF(DeltaStepArgs, q_scale), OFF(DeltaStepArgs, eps),
        ATTN_BLOCK, ATTN_MAX_SPLIT, ATTN_SPLIT_PARTS, ATTN_SIMDGROUPS, ATTN_HEADS_PER_SIMDGROUP, ATTN_MAX_HEAD_DIM, ATTN_MAX_GROUP, ATTN_PREP_MAX_THREADS, FC_ATTN,
        DELTA_CONV_THREADS, DELTA_ROWS_PER_THREAD, DELTA_MAX_SIMDGROUPS, FC_DELTA,
        sizeof(QMVMultiArgs), OFF(QMVMultiArgs, k), OFF(QMVMultiArgs, matrices), OFF(QMVMultiArgs, rows), OFF(QMVMultiArgs, block_end), QMV_MULTI_MAX,
        OFF(RMSNormArgs, threads), OFF(DeltaStepArgs, taps),
        sizeof(MoEDownArgs), OFF(MoEDownArgs, rows), OFF(MoEDownArgs, k), OFF(MoEDownArgs, experts), OFF(MoEDownArgs, top_k), OFF(MoEDownArgs, shared_k),
        ELEMENTWISE_THREADS, QMV_THREADS, ROUTER_THREADS, ATTN_DECODE_THREADS, DELTA_STEP_MAX_THREADS, DELTA_CHUNK_SCAN_THREADS,
        QMV_ROWS_MAX_TOKENS,
`
	var (
		r   shaders.RMSNormArgs
		q   shaders.QMVArgs
		a   shaders.ArgmaxArgs
		moe shaders.MoEArgs
	)
	var (
		ap shaders.AttnPrepArgs
		ad shaders.AttnDecodeArgs
		dc shaders.DeltaConvArgs
		ds shaders.DeltaStepArgs
	)
	var (
		qm shaders.QMVMultiArgs
		md shaders.MoEDownArgs
	)
	want := []uintptr{
		unsafe.Sizeof(r), unsafe.Offsetof(r.N), unsafe.Offsetof(r.Eps), unsafe.Offsetof(r.WeightOffset), unsafe.Offsetof(r.RowStride),
		unsafe.Sizeof(q), unsafe.Offsetof(q.Rows), unsafe.Offsetof(q.K), unsafe.Offsetof(q.Experts),
		unsafe.Sizeof(moe), unsafe.Offsetof(moe.N), unsafe.Offsetof(moe.K), unsafe.Offsetof(moe.Normalize),
		unsafe.Sizeof(a), unsafe.Offsetof(a.N), unsafe.Offsetof(a.OutIndex),
		shaders.RMSNormMaxSimdgroups, shaders.QMVRows, shaders.QMVSimdgroups, shaders.QMVGroupSize, shaders.QMVWordsPerLane, shaders.ArgmaxMaxSimdgroups,
		shaders.MoEMaxExperts, shaders.MoEMaxTopK, shaders.ArgmaxUnroll,
		unsafe.Sizeof(ap), unsafe.Offsetof(ap.Heads), unsafe.Offsetof(ap.KVHeads), unsafe.Offsetof(ap.HeadDim), unsafe.Offsetof(ap.RotaryDim), unsafe.Offsetof(ap.Pos), unsafe.Offsetof(ap.Eps), unsafe.Offsetof(ap.InvFreq),
		unsafe.Sizeof(ad), unsafe.Offsetof(ad.N), unsafe.Offsetof(ad.Parts), unsafe.Offsetof(ad.Heads), unsafe.Offsetof(ad.KVHeads), unsafe.Offsetof(ad.Scale), unsafe.Offsetof(ad.PartLen),
		unsafe.Sizeof(dc), unsafe.Offsetof(dc.Channels), unsafe.Offsetof(dc.Taps),
		unsafe.Sizeof(ds), unsafe.Offsetof(ds.KeyHeads), unsafe.Offsetof(ds.ValueHeads), unsafe.Offsetof(ds.ValueDim), unsafe.Offsetof(ds.QScale), unsafe.Offsetof(ds.Eps),
		shaders.AttnBlock, shaders.AttnMaxSplit, shaders.AttnSplitParts, shaders.AttnSimdgroups, shaders.AttnHeadsPerSimdgroup, shaders.AttnMaxHeadDim, shaders.AttnMaxGroup, shaders.AttnPrepMaxThreads, shaders.FCAttn,
		shaders.DeltaConvThreads, shaders.DeltaRowsPerThread, shaders.DeltaMaxSimdgroups, shaders.FCDelta,
		unsafe.Sizeof(qm), unsafe.Offsetof(qm.K), unsafe.Offsetof(qm.Matrices), unsafe.Offsetof(qm.Rows), unsafe.Offsetof(qm.BlockEnd), shaders.QMVMultiMax,
		unsafe.Offsetof(r.Threads), unsafe.Offsetof(ds.Taps),
		unsafe.Sizeof(md), unsafe.Offsetof(md.Rows), unsafe.Offsetof(md.K), unsafe.Offsetof(md.Experts), unsafe.Offsetof(md.TopK), unsafe.Offsetof(md.SharedK),
		shaders.ElementwiseThreads, shaders.QMVThreads, shaders.RouterThreads, shaders.AttnDecodeThreads, shaders.DeltaStepMaxThreads, shaders.DeltaChunkScanThreads,
		shaders.QMVRowsMaxTokens,
	}
	checkLayout(t, d, values, want)
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

// TestEveryKernelKeepsAppleRules compiles every kernel entry point of every
// file through the sim, which refuses what Apple's Metal compiler refuses
// (sim.Rule), so a kernel that would not build on a Mac fails here.
func TestEveryKernelKeepsAppleRules(t *testing.T) {
	d := device(t)
	entry := regexp.MustCompile(`(?m)^kernel void (\w+)\(`)
	n := 0
	for _, file := range shaders.Names() {
		src, err := shaders.Source(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range entry.FindAllStringSubmatch(src, -1) {
			if _, err := d.NewPipeline(gpu.Source{Name: file, Text: src}, m[1]); err != nil {
				t.Errorf("%s: %v", m[1], err)
			}
			n++
		}
	}
	if n < 20 {
		t.Fatalf("found only %d kernels", n)
	}
	t.Logf("%d kernels checked", n)
}
