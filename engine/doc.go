// Package engine holds what every backend shares: the [Model] and
// [Sequence] interfaces a backend implements and the decoding loops built
// on them.
//
// # Layers
//
//	engine/safetensors  memory-mapped tensor files
//	engine/checkpoint   config, shards and validated weights
//	engine/cpu          the pure-Go reference backend
//
// Lower layers never import higher ones.
package engine
