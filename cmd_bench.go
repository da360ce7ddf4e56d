package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/gpumodel"
)

func init() {
	commands["bench"] = command{
		summary: "decode speed on a backend, or with --dry-run what one GPU decode step encodes and reads",
		run:     runBench,
	}
}

// Memory bandwidths the dry run converts weight bytes into decode rates for:
// M4 Max (546 GB/s) and M5 Max-class (614 GB/s).
var dryRunBandwidths = []float64{546e9, 614e9}

func runBench(args []string, stdout io.Writer) error {
	fs := newFlags("bench", os.Stderr)
	dir := fs.String("model", "", "checkpoint folder (with --dry-run, only config.json is read; default: the Qwen3.6-35B-A3B shape)")
	dry := fs.Bool("dry-run", false, "record one GPU decode step instead of running anything")
	context := fs.Int("context", 0, "tokens already in the context (dry run: the step's position; run: prompt length)")
	tokens := fs.Int("tokens", 32, "tokens to decode (not with --dry-run)")
	backend := fs.String("backend", "cpu", "backend (not with --dry-run)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *context < 0 || *tokens < 1 {
		return errors.New("--context must be >= 0 and --tokens >= 1")
	}
	if *dry {
		return dryRun(*dir, *context, stdout)
	}
	return benchDecode(*dir, *backend, max(*context, 1), *tokens, stdout)
}

func dryRun(dir string, pos int, w io.Writer) error {
	cfg, name := checkpoint.Qwen36(), "Qwen3.6-35B-A3B (built-in shape)"
	if dir != "" {
		c, err := checkpoint.ReadConfig(dir)
		if err != nil {
			return err
		}
		cfg, name = c, dir
	}
	r, err := gpumodel.DryRun(cfg, pos)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "model:                %s\n", name)
	fmt.Fprintf(w, "decode step at position %d (one command buffer)\n", r.Position)
	fmt.Fprintf(w, "dispatches:           %d\n", r.Dispatches)
	fmt.Fprintf(w, "dependency levels:    %d\n", r.Levels)
	fmt.Fprintf(w, "weight bytes read:    %d (%.3f GB)\n", r.WeightBytes, float64(r.WeightBytes)/1e9)
	for _, bw := range dryRunBandwidths {
		fmt.Fprintf(w, "bound at %3.0f GB/s:    %.1f tokens/s\n", bw/1e9, r.TokensPerSecond(bw))
	}
	return nil
}

func benchDecode(dir, backend string, prompt, n int, w io.Writer) error {
	m, err := openModel(dir, backend)
	if err != nil {
		return err
	}
	defer m.Close()
	seq, err := m.NewSequence()
	if err != nil {
		return err
	}
	defer seq.Close()
	cfg := m.Config()
	ids := make([]int, prompt)
	for i := range ids {
		ids[i] = (i*7919 + 1) % cfg.Vocab
	}
	start := time.Now()
	logits := make([]float32, cfg.Vocab)
	if err := seq.Forward(ids, logits); err != nil {
		return err
	}
	prefill := time.Since(start)
	start = time.Now()
	out, err := engine.Greedy(seq, cfg.Vocab, []int{engine.Argmax(logits)}, n, nil)
	if err != nil {
		return err
	}
	decode := time.Since(start)
	fmt.Fprintf(w, "backend %s, model %s\n", backend, dir)
	fmt.Fprintf(w, "prefill: %d tokens in %v (%.1f tokens/s)\n", prompt, prefill.Round(time.Millisecond), float64(prompt)/prefill.Seconds())
	fmt.Fprintf(w, "decode:  %d tokens in %v (%.1f tokens/s)\n", len(out), decode.Round(time.Millisecond), float64(len(out))/decode.Seconds())
	return nil
}
