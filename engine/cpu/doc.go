// Package cpu is the pure-Go reference backend: it computes MODEL.md's
// forward pass with fp32 accumulation, reading the memory-mapped weights in
// place. Quantized products dequantize one group of weights at a time in
// registers; no dequantized matrix ever exists. Work is split over all
// cores by rows (products) or heads (mixers).
//
// It is the oracle every GPU kernel is tested against, and the engine on
// machines without a supported GPU.
package cpu
