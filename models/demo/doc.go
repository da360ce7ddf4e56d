// Package demo holds Petal's demo model: a 32-million-parameter model of
// the Qwen3.5/3.6-MoE architecture (Gated DeltaNet and gated attention in
// the 3:1 pattern, 16 experts top-4 with a shared expert) trained on the
// Brown corpus and 60,000 short templated and written dialogues, in the
// MLX 4-bit layout of the real checkpoint, with its own byte-level BPE
// tokenizer and the Qwen3.5 chat template.
//
// It exists so that Petal works on a fresh machine before the 19 GB model
// is installed: the files are embedded in the binary ([Files]) and written
// to a folder on first use by the caller. README.md in this folder is the
// model card; tools/demomodel rebuilds it.
package demo
