// Package cpu is the pure-Go reference backend: it computes MODEL.md's
// forward pass with fp32 accumulation, reading the memory-mapped weights in
// place. Quantized products dequantize one group of weights at a time in
// registers; no dequantized matrix ever exists. Work is split over all
// cores by rows (products) or heads (mixers).
//
// Model.Step advances several sequences in one pass (engine.Stepper):
// their tokens share every product, each weight read once for all of
// them, while attention and DeltaNet run on each sequence's own state. A
// product gives each input row the same sum whatever rows run beside it,
// so a sequence's logits in any batch are bit for bit those of its
// Forward alone, and its greedy tokens the same.
//
// It is the oracle every GPU kernel is tested against, and the engine on
// machines without a supported GPU.
package cpu
