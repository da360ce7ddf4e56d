// Package tower runs the Qwen3.5/3.6 vision tower on the CPU in fp32: the
// merged image features the text model takes at an image's tokens, as
// transformers' Qwen3_5MoeVisionModel computes them from the processor's
// pixel values ([preprocess.Pixels]).
//
// # The computation
//
//  1. Patch embedding: the Conv3d of stride = kernel (temporal 2, patch 16)
//     is one product per patch with the weight as [hidden][C·T·P·P].
//  2. Learned positions: the Side² table bilinearly interpolated to the
//     image's patch grid (corners at linspace(0, Side-1)), added.
//  3. Blocks: x += proj(attention(LayerNorm1(x))), x += fc2(gelu_tanh(fc1(
//     LayerNorm2(x)))), every layer with biases. Attention is full (not
//     causal) over the patches of a frame, 2D rotary on q and k: the first
//     half of each head's rotary angles from the patch's row, the second
//     from its column, rotate-half pairing over the whole head.
//  4. Merger: LayerNorm of each patch, the Merge² patches of a merge block
//     (consecutive in the pixel values' order) side by side, fc1, exact
//     GELU, fc2 into the text model's width. Qwen3.5/3.6 has no deepstack
//     features: nothing goes to the text model's inner layers.
//
// The products run in parallel over patches, attention over (patch, head).
// Weights are widened to fp32 once by [New] (about 1.7 GB for Qwen3.6's
// 415M-parameter tower).
package tower
