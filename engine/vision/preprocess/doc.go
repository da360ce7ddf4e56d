// Package preprocess turns an image a client sent into the pixel values the
// Qwen3.6 vision tower takes, as transformers' processor for the model
// (Qwen3VLProcessor with Qwen2VLImageProcessorFast) computes them.
//
// # Decoding
//
// [Decode] reads PNG, JPEG, WebP and GIF (its first frame) and refuses a
// hostile file before any pixel is decoded: its byte size, the header's
// width, height, their product and the decoded size they imply, and a GIF's
// frame count (scanned block by block, no pixel decoded) are checked against
// [Limits] first. A refusal is a [*LimitError] naming the limit and its
// value, meant to be shown to the client as it is (a 400).
//
// A JPEG's chroma is upsampled and converted to RGB as libjpeg-turbo (PIL,
// the processor's decoder) does, so its pixels differ from PIL's only
// through the two IDCTs, by a level or two; PNG, GIF and WebP pixels are
// exact.
//
// # Preprocessing
//
// [Preprocess] does what the processor does to a still image:
//  1. convert to RGB (alpha dropped, not composited, as PIL's convert("RGB"));
//  2. [SmartResize]: sides rounded to multiples of patch_size·merge_size
//     (32), the area brought within [min_pixels, max_pixels]
//     (size.shortest_edge and size.longest_edge of preprocessor_config.json);
//  3. resize with torchvision's bicubic antialiased filter on uint8 tensors,
//     the integer arithmetic of ATen's uint8 path (weights in int16 with a
//     computed precision, horizontal pass then vertical, each rounded and
//     clamped to uint8);
//  4. rescale and normalise fused, in float32: (x − mean·255) / (std·255);
//  5. the frame repeated temporal_patch_size times and flattened into
//     patches in the processor's order: rows by merge block (row-major),
//     then by the patch inside the block; each row channel, time, y, x.
//
// The grid is (t, h, w) in patches and the image takes t·h·w / merge²
// tokens in the prompt.
//
// # Which processor
//
// transformers 5.17 loads Qwen3.6's preprocessor_config.json
// (image_processor_type Qwen2VLImageProcessorFast) as Qwen2VLImageProcessor
// on its torchvision backend, the one followed here, resizing on the CPU.
// Measured on the reference images (testdata/expected.json, tools/visprep):
// its PIL backend (Qwen2VLImageProcessorPil) differs by up to 2 levels
// (0.0157 normalised), and torchvision's float path, which it takes for a
// uint8 image on a GPU, by up to 20 levels when growing an image; the
// values here equal the CPU path's exactly.
package preprocess
