// Package engine holds what every backend shares: the [Model] and
// [Sequence] interfaces a backend implements and the decoding loops built
// on them.
//
// # Layers
//
//	engine/damaged       the one marker for a model whose files are bad
//	engine/jsonquote     JSON strings as nlohmann::json and Python write them
//	engine/safetensors   memory-mapped tensor files
//	engine/checkpoint    config, shards and validated weights
//	engine/checkpoint/checkpointtest  small random checkpoints for tests
//	engine/tokenizer     text to token ids and back
//	engine/chattemplate  the checkpoint's own chat template
//	engine/reply         a reply split into reasoning, answer and tool calls
//	engine/grammar       a reply constrained to a JSON Schema
//	engine/sample        the next token from a row of logits
//	engine/sample/chisq  the samplers' goodness-of-fit test
//	engine/spec          speculative decoding: the acceptance rule and when drafting pays
//	engine/vision/preprocess  images to the vision tower's pixel values
//	engine/vision/tower  the vision tower: an image's features for the prompt
//	engine/cpu           the pure-Go reference backend
//	engine/gpumodel      the GPU backend, on any gpu.Device
//	engine/backend       a backend by its --backend name
//	engine/reftest       the reference fixtures transformers wrote
//
// Lower layers never import higher ones.
package engine
