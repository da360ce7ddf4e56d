// Command synth35b writes a synthetic checkpoint of Qwen3.6-35B-A3B's full
// shape in the layout mlx-community's 4-bit conversion ships: the same
// tensor names, dtypes and shapes (MODEL.md), MLX affine 4-bit groups of
// 64 with the router and shared-expert gates at 8 bits, shards split as
// mlx-lm splits them (5 GiB), each written as MLX's save_safetensors
// writes it (safetensors.MLXHead), the index, config.json, and tokenizer
// files copied from another model folder (the real 248k vocabulary is not
// in the repository). Weights are random and scaled so activations stay
// finite: uniform codes, per-group scales of about 1/sqrt(in), biases that
// centre each group on zero.
//
// With --layout pulled the shards are laid out as petal pull stores them
// (header padded to 16 bytes, tensors ordered so each is aligned), so the
// GPU backend binds every weight in place instead of copying it at load.
//
// It streams: every chunk of every tensor is made from (seed, tensor,
// offset) alone and written in place by a pool of workers, so memory stays
// at a few MB per worker and the 19.4 GB go out as fast as the disk takes
// them. With --layers N it writes N layers of the real dimensions (N=2 is
// the real-dimension 2-layer shape of issue 20).
//
// With --vision it also writes the vision tower at its real dimensions
// (mlx-vlm's layout: BF16 under vision_tower., the Conv3d weight
// channels-last), so the model binds a tower and takes images.
//
//	go run ./tools/synth35b --out /tmp/q36 [--layers 40] [--vision] [--tokenizer-from models/demo]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "synth35b:", err)
		os.Exit(1)
	}
}

// tokenizerFiles are copied from --tokenizer-from when present there.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("synth35b", flag.ContinueOnError)
	out := fs.String("out", "", "folder to write (created; must be empty if it exists)")
	layers := fs.Int("layers", 40, "decoder layers (40: the real model; 2: issue 20's real-dimension shape)")
	shardGiB := fs.Float64("shard-gib", 5, "largest shard, GiB (mlx-lm's default 5)")
	seed := fs.Uint64("seed", 1, "random seed")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "goroutines filling and writing chunks")
	tok := fs.String("tokenizer-from", "models/demo", "model folder whose tokenizer files are copied (empty: none)")
	layout := fs.String("layout", "mlx", "shard layout: mlx (as the hub serves it: header unpadded, data in MLX's unordered layout) or pulled (as petal pull stores it: every tensor aligned for the GPU)")
	vision := fs.Bool("vision", false, "also write the vision tower (27 blocks at the real dimensions, 0.9 GB of BF16 under vision_tower., as mlx-vlm converts it), so the model takes images")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *out == "" {
		return errors.New("--out DIR is required")
	}
	if *layers < 1 || *layers > 1000 || *shardGiB <= 0 || *workers < 1 {
		return errors.New("--layers must be in [1,1000], --shard-gib > 0 and --workers >= 1")
	}
	if *layout != "mlx" && *layout != "pulled" {
		return fmt.Errorf("--layout %q: want mlx or pulled", *layout)
	}
	if err := emptyDir(*out); err != nil {
		return err
	}
	start := time.Now()
	sh := qwen36(*layers)
	sh.vision = *vision
	w, err := write(options{dir: *out, shape: sh, shardBytes: int64(*shardGiB * (1 << 30)), seed: *seed, workers: *workers, pulled: *layout == "pulled"})
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	if err := writeGenerationConfig(*out, sh); err != nil {
		return err
	}
	var copied []string
	if *tok != "" {
		for _, name := range tokenizerFiles {
			ok, err := copyIfPresent(filepath.Join(*tok, name), filepath.Join(*out, name))
			if err != nil {
				return err
			}
			if ok {
				copied = append(copied, name)
			}
		}
		if len(copied) == 0 {
			return fmt.Errorf("--tokenizer-from %s holds none of %v", *tok, tokenizerFiles)
		}
	}
	fmt.Fprintf(stdout, "wrote %s: %d layers (vision tower %v), %d tensors in %d shards (%s layout), %d bytes in %.1f s (%.2f GB/s, %d workers); tokenizer files %v from %s\n",
		*out, *layers, *vision, w.tensors, len(w.shards), *layout, w.bytes, secs, float64(w.bytes)/secs/1e9, *workers, copied, *tok)
	return nil
}

// emptyDir makes dir, or accepts it if it exists and is empty: the tool
// never mixes its shards with another checkpoint's.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("--out %s is not empty", dir)
	}
	return nil
}

func writeGenerationConfig(dir string, s shape) error {
	data := fmt.Sprintf("{\n  \"eos_token_id\": [%d, %d],\n  \"do_sample\": true,\n  \"temperature\": 1.0,\n  \"top_k\": 20,\n  \"top_p\": 0.95\n}\n", s.eos[0], s.eos[1])
	return os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(data), 0o644)
}

func copyIfPresent(src, dst string) (bool, error) {
	data, err := os.ReadFile(src)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, os.WriteFile(dst, data, 0o644)
}
