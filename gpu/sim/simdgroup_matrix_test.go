package sim_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
)

// simdgroupMatrixSrc: each of two simd-groups computes D = A0*B0 + A1*B1 +
// C (8x8, fp32) with A loaded from device memory, B loaded transposed from
// threadgroup memory, C filled; then D * I again through simdgroup_multiply
// with a diagonal matrix, stored to device memory at the simd-group's
// offset. With flags[0] set, half of each simd-group skips the product and
// reaches the next simd-group call instead.
const simdgroupMatrixSrc = `#include <metal_stdlib>
using namespace metal;

kernel void mma(
    device const float* a [[buffer(0)]],
    device const float* b [[buffer(1)]],
    device float* out [[buffer(2)]],
    device const uint* flags [[buffer(3)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    threadgroup float bt[2 * 2 * 64];
    for (uint i = tid; i < 2 * 2 * 64; i += 64) {
        bt[i] = b[i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.5f);
    for (uint k = 0; k < 2; k++) {
        simdgroup_float8x8 ma;
        simdgroup_float8x8 mb;
        simdgroup_load(ma, a + (sg * 2 + k) * 64, 8);
        simdgroup_load(mb, bt + (sg * 2 + k) * 64, 8, ulong2(0, 0), true);
        if (flags[0] == 0 || lane < 16) {
            simdgroup_multiply_accumulate(acc, ma, mb, acc);
        }
    }
    simdgroup_float8x8 res;
    simdgroup_multiply(res, acc, simdgroup_float8x8(1.0f));
    simdgroup_store(res, out + sg * 64, 8);
}
`

func TestSimdgroupMatrix(t *testing.T) {
	for _, fast := range []bool{false, true} {
		d := openSim(t, sim.Options{Fast: fast})
		p := mustPipeline(t, d, gpu.Source{Name: "mma.metal", Text: simdgroupMatrixSrc}, "mma")
		a, b := make([]float32, 4*64), make([]float32, 4*64)
		for i := range a {
			a[i] = float32(i%13) - 6
			b[i] = float32(i%7)*0.25 - 0.5
		}
		buf := func(v []float32) gpu.Buffer {
			bb, err := d.NewBuffer(4 * len(v))
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range v {
				binary.LittleEndian.PutUint32(bb.Contents()[4*i:], math.Float32bits(x))
			}
			return bb
		}
		run := func(divergent bool) (gpu.Buffer, error) {
			out := buf(make([]float32, 2*64))
			flag := []float32{0}
			if divergent {
				flag[0] = math.Float32frombits(1)
			}
			cb, err := d.NewCommandBuffer()
			if err != nil {
				t.Fatal(err)
			}
			if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: 64, Y: 1, Z: 1},
				Args: []gpu.Arg{gpu.BufferArg(0, buf(a), 0), gpu.BufferArg(1, buf(b), 0), gpu.BufferArg(2, out, 0), gpu.BufferArg(3, buf(flag), 0)}}); err != nil {
				t.Fatal(err)
			}
			if err := cb.Commit(); err != nil {
				t.Fatal(err)
			}
			return out, cb.Wait()
		}
		out, err := run(false)
		if err != nil {
			t.Fatal(err)
		}
		for sg := range 2 {
			for r := range 8 {
				for c := range 8 {
					want := float32(0.5)
					for k := range 2 {
						am, bm := a[(sg*2+k)*64:], b[(sg*2+k)*64:]
						for j := range 8 {
							// B was loaded transposed: B[j][c] = bm[c*8+j].
							want = float32(math.FMA(float64(am[r*8+j]), float64(bm[c*8+j]), float64(want)))
						}
					}
					got := math.Float32frombits(binary.LittleEndian.Uint32(out.Contents()[4*(sg*64+r*8+c):]))
					if got != want {
						t.Fatalf("fast=%v simd-group %d: D[%d][%d] = %v, want %v", fast, sg, r, c, got, want)
					}
				}
			}
		}
		if _, err := run(true); !errors.Is(err, sim.ErrDivergence) {
			t.Errorf("fast=%v: a product half the lanes skip: %v, want ErrDivergence", fast, err)
		}
	}
}

// stagedSrc: two simd-groups take two steps, each staging both 8x8
// operands in threadgroup memory, a barrier, then each multiplies its own
// operand by the other's. With flags[0] set a barrier closes each step;
// without, the next step's staging may overwrite an operand the other
// simd-group has not loaded yet.
const stagedSrc = `#include <metal_stdlib>
using namespace metal;

kernel void staged(
    device const float* a [[buffer(0)]],
    device float* out [[buffer(1)]],
    device const uint* flags [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float tile[2 * 64];
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint k = 0; k < 2; k++) {
        for (uint i = tid; i < 2 * 64; i += 64) {
            tile[i] = a[k * 2 * 64 + i];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simdgroup_float8x8 x;
        simdgroup_float8x8 y;
        simdgroup_load(x, tile + sg * 64, 8);
        simdgroup_load(y, tile + (1 - sg) * 64, 8);
        simdgroup_multiply_accumulate(acc, x, y, acc);
        if (flags[0] != 0) {
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
    }
    simdgroup_store(acc, out + sg * 64, 8);
}
`

// Simd-groups that only meet at simd-group calls between two barriers do
// not advance in step on the GPU: the race check must see a write that
// overtakes another simd-group's reads, which lockstep scheduling hides.
func TestRaceBetweenSimdgroupSteps(t *testing.T) {
	d := openSim(t, sim.Options{})
	p := mustPipeline(t, d, gpu.Source{Name: "staged.metal", Text: stagedSrc}, "staged")
	a := make([]uint32, 2*2*64)
	for i := range a {
		a[i] = math.Float32bits(float32(i%11) - 5)
	}
	run := func(barrier uint32) error {
		cb, err := d.NewCommandBuffer()
		if err != nil {
			t.Fatal(err)
		}
		if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: 64, Y: 1, Z: 1},
			Args: []gpu.Arg{gpu.BufferArg(0, buffer(t, d, a), 0), gpu.BufferArg(1, buffer(t, d, make([]uint32, 2*64)), 0), gpu.BufferArg(2, buffer(t, d, []uint32{barrier}), 0)}}); err != nil {
			t.Fatal(err)
		}
		if err := cb.Commit(); err != nil {
			t.Fatal(err)
		}
		return cb.Wait()
	}
	if err := run(1); err != nil {
		t.Fatalf("with the closing barrier: %v", err)
	}
	if err := run(0); !errors.Is(err, sim.ErrRace) {
		t.Errorf("without the closing barrier: %v, want ErrRace", err)
	}
}
