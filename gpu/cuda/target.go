package cuda

import (
	"fmt"
	"strings"

	"petal/gpu"
	"petal/gpu/msl"
)

// target writes kernels for cuda_compat.h: a kernel becomes a device
// function called by a __global__ entry point petal_kernel_<name> that
// takes one Params (see cuda_compat.h). Only the wanted kernel gets an
// entry point, so NVRTC generates code for it alone.
type target struct{ want string }

var builtins = map[string]string{
	"thread_position_in_grid":             "petal::b3(blockIdx.x*blockDim.x+threadIdx.x, blockIdx.y*blockDim.y+threadIdx.y, blockIdx.z*blockDim.z+threadIdx.z)",
	"threadgroup_position_in_grid":        "petal::b3(blockIdx.x, blockIdx.y, blockIdx.z)",
	"thread_position_in_threadgroup":      "petal::b3(threadIdx.x, threadIdx.y, threadIdx.z)",
	"threads_per_threadgroup":             "petal::b3(blockDim.x, blockDim.y, blockDim.z)",
	"threadgroups_per_grid":               "petal::b3(gridDim.x, gridDim.y, gridDim.z)",
	"threads_per_grid":                    "petal::b3(gridDim.x*blockDim.x, gridDim.y*blockDim.y, gridDim.z*blockDim.z)",
	"thread_index_in_threadgroup":         "petal::b3(petal::tindex(), 0, 0)",
	"simdgroup_index_in_threadgroup":      "petal::b3(petal::tindex() / 32, 0, 0)",
	"thread_index_in_simdgroup":           "petal::b3(petal::tindex() % 32, 0, 0)",
	"threads_per_simdgroup":               "petal::b3(32, 0, 0)",
	"thread_execution_width":              "petal::b3(32, 0, 0)",
	"simdgroups_per_threadgroup":          "petal::b3((petal::tcount() + 31) / 32, 0, 0)",
	"dispatch_simdgroups_per_threadgroup": "petal::b3((petal::tcount() + 31) / 32, 0, 0)",
}

func (target) Builtin(attr string) (string, bool) {
	e, ok := builtins[attr]
	return e, ok
}

func (target) BufferArg(typ string, n int) string {
	return fmt.Sprintf("petal::arg_cast<%s>::get((void*)P.buffers[%d])", typ, n)
}

func (target) ThreadgroupArg(typ string, n int) string {
	return fmt.Sprintf("(%s)(petal_dyn + P.tgoff[%d])", typ, n)
}

// Storage makes a threadgroup variable a block's shared memory.
func (target) Storage([]string) (string, string) { return "__shared__", "" }

func (target) Function() string { return "static __device__ void" }

// Entry bounds every kernel at Metal's limit, not at its
// [[max_total_threads_per_threadgroup]]: NVRTC budgets registers for the
// bound, and the qmv kernels bounded at their 64 threads (9229e9c) lost
// their spills but cost the 35B decode step 6-7% on an H200 (37095d7).
// The multi-row products (ownBound) keep their own bound. The pipeline
// still reports the kernel's own bound (NewPipeline), so no dispatch
// exceeds it.
func (t target) Entry(name string, args []string, maxThreads int) string {
	if name != t.want {
		return ""
	}
	bound := gpu.MaxThreadsPerThreadgroup
	if ownBound(name) && maxThreads > 0 {
		bound = maxThreads
	}
	return fmt.Sprintf("extern \"C\" __global__ void __launch_bounds__(%d) petal_kernel_%s(const petal::Params P) {\n\t%s(%s);\n}\n",
		bound, name, name, strings.Join(args, ",\n\t\t"))
}

// ownBoundPrefixes name the kernels compiled at their own bound: the
// multi-row products of shaders/qmv_rows.metal hold an accumulator per
// weight row and decode row beside the rows' dequantized words, about 120
// registers a thread, which Metal's limit (64 registers a thread at 1024
// threads) would spill to local memory.
var ownBoundPrefixes = []string{"qmv_rows_", "moe_rows_"}

func ownBound(name string) bool {
	for _, p := range ownBoundPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// rewrite turns MSL source into CUDA C++ with an entry point for function.
func rewrite(name, src, function string, consts []gpu.Constant) (*msl.Rewritten, error) {
	return msl.Rewrite(name, src, consts, target{want: function})
}
