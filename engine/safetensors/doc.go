// Package safetensors reads safetensors files without copying their data:
// each file is memory-mapped read-only and every tensor is a view into the
// mapping.
//
// # Trust
//
// Model files are untrusted input. The header parser checks every field
// (dtype, shape, offsets, overlap, bounds against the file) and returns an
// error marked with [ErrCorrupt] instead of panicking; it is fuzzed
// (FuzzParseHeader). Alignment is never a reason to refuse a file: the
// format does not require it and MLX's writer does not provide it.
//
// # Layout
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
// mapping tensor names to {dtype, shape, data_offsets}, then the data
// section; offsets are relative to the start of the data section. Tensors
// may appear in the data in any order, the header may or may not carry
// __metadata__, and the data section may start at any byte.
//
// # Writers
//
// [Encode] pads the header and every tensor to 8 bytes, the layout Petal's
// own test checkpoints use. [EncodeMLX] writes exactly what MLX's
// mx.save_safetensors writes, so tests meet real files' layouts.
package safetensors
