// Package safetensors reads safetensors files without copying their data:
// each file is memory-mapped read-only and every tensor is a view into the
// mapping.
//
// # Trust
//
// Model files are untrusted input. The header parser checks every field
// (dtype, shape, offsets, overlap, alignment, bounds against the file) and
// returns an error marked with [ErrCorrupt] instead of panicking; it is
// fuzzed (FuzzParseHeader).
//
// # Layout
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
// mapping tensor names to {dtype, shape, data_offsets}, then the data
// section; offsets are relative to the start of the data section.
package safetensors
