package shaders

import (
	"fmt"

	"petal/gpu"
)

// kernelThreads is, for each kernel dispatched with a fixed threadgroup or
// one no larger than a fixed bound, that size: the N of the kernel's
// [[max_total_threads_per_threadgroup(N)]] (TestKernelThreads holds the two
// equal). The other kernels size their threadgroups from the pipeline's
// MaxThreads.
var kernelThreads = map[string]int{
	"attn_prep_f16kv":   AttnPrepMaxThreads,
	"attn_decode_f16kv": AttnDecodeThreads,
	"attn_merge_f32":    AttnMaxHeadDim, // a thread per dim of a head

	"delta_conv_shift_f32": DeltaConvThreads,
	"delta_step_conv_f32":  DeltaStepMaxThreads,
	"delta_conv_rows_f32":  DeltaConvThreads,
	"delta_chunk_prep_f32": DeltaChunkPrepThreads,
	"delta_chunk_scan_f32": DeltaChunkScanThreads,

	"router_topk_f32":      RouterThreads,
	"moe_combine_rows_f32": ElementwiseThreads,
	"swiglu_f32":           ElementwiseThreads,
	"embed_bf16_gs64_b4":   ElementwiseThreads,

	"qmm_bf16_gs64_b4":         QMMThreads,
	"qmm_bf16_gs64_b8":         QMMThreads,
	"qmm_experts_bf16_gs64_b4": QMMThreads,

	"qmm_small_bf16_gs64_b4":         QMMThreads,
	"qmm_small_bf16_gs64_b8":         QMMThreads,
	"qmm_experts_small_bf16_gs64_b4": QMMThreads,

	"qmv_bf16_gs64_b4":                            QMVThreads,
	"qmv_bf16_gs64_b8":                            QMVThreads,
	"qmv_add_bf16_gs64_b4":                        QMVThreads,
	"qmv_add_bf16_gs64_b8":                        QMVThreads,
	"qmv_multi_bf16_gs64_b4":                      QMVThreads,
	"qmv_multi_norm_bf16_gs64_b4":                 QMVThreads,
	"qmv_multi_bf16_gs64_b8":                      QMVThreads,
	"qmv_multi_norm_bf16_gs64_b8":                 QMVThreads,
	"qmv_swiglu_bf16_gs64_b4":                     QMVThreads,
	"qmv_swiglu_norm_bf16_gs64_b4":                QMVThreads,
	"qmv_experts_swiglu_bf16_gs64_b4":             QMVThreads,
	"qmv_experts_swiglu_routed_norm_bf16_gs64_b4": QMVThreads,
	"moe_down_combine_bf16_gs64_b4":               QMVThreads,

	"qmv_rows_bf16_gs64_b4":                       QMVThreads,
	"qmv_rows_bf16_gs64_b8":                       QMVThreads,
	"qmv_rows_swiglu_bf16_gs64_b4":                QMVThreads,
	"qmv_rows_experts_swiglu_routed_bf16_gs64_b4": QMVThreads,
	"moe_rows_down_combine_bf16_gs64_b4":          QMVThreads,

	"vis_layernorm_f32": VisThreads,
	"vis_dense_bf16":    VisDenseThreads,
	"vis_dense_f32":     VisDenseThreads,
	"vis_rope_f32":      VisThreads,
	"vis_attention_f32": VisAttnThreads,
	"vis_copy_f32":      VisThreads,
	"mrope_prep_f16kv":  AttnPrepMaxThreads,
}

// checkThreads reports a pipeline that cannot take the threadgroup its
// kernel is dispatched with. Metal's maxTotalThreadsPerThreadgroup may be
// lower than the kernel declares when it needs many registers; finding it
// when the pipeline is built names the kernel at once, instead of a
// dispatch failing later in a command buffer.
func checkThreads(file string, p gpu.Pipeline) error {
	need, ok := kernelThreads[p.Name()]
	if !ok || p.MaxThreads() >= need {
		return nil
	}
	return fmt.Errorf("%w: shaders: %s %s: the pipeline takes at most %d threads per threadgroup, and the kernel is dispatched with up to %d",
		gpu.ErrUnsupported, file, p.Name(), p.MaxThreads(), need)
}
