package checkpointtest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"petal/engine/safetensors"
)

// PadTensor names the odd-sized tensor [RewriteMLX] adds to a
// checkpoint's first shard. Its "mtp." prefix is one a text-only engine
// skips, as it skips a real checkpoint's multi-token-prediction head.
const PadTensor = "mtp.layout_pad"

// padBytes is the pad tensor's size: odd, so the tensors written after it
// are misaligned for every element size.
const padBytes = 3

// RewriteMLX copies the checkpoint in src to dst (an existing folder)
// with every shard written as MLX's save_safetensors writes it
// ([safetensors.EncodeMLX], metadata {"format":"mlx"}): the header
// unpadded, entries sorted by name, the data back to back in an order
// other than the header's (a shuffle seeded by the shard's name, standing
// in for MLX's hash-map order). The first shard also gets [PadTensor], a
// U8 tensor of 3 bytes in the middle of its data order, whose name is
// lengthened until that shard's data section starts at offset mod 16; so
// tensors before it and after it sit at different alignments, and the
// other shards at whatever their headers give. The index lists the pad
// tensor too; other files are copied as they are.
func RewriteMLX(src, dst string, offset int) error {
	if offset < 0 || offset > 15 {
		return fmt.Errorf("checkpointtest: data offset %d mod 16", offset)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	var shards []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			shards = append(shards, e.Name())
		} else if !e.IsDir() && e.Name() != indexFile {
			if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	}
	if len(shards) == 0 {
		return fmt.Errorf("checkpointtest: %s holds no shards", src)
	}
	for i, name := range shards {
		pad := -1
		if i == 0 {
			pad = offset
		}
		if err := rewriteShard(filepath.Join(src, name), filepath.Join(dst, name), pad); err != nil {
			return err
		}
	}
	return rewriteIndex(src, dst, shards[0])
}

const indexFile = "model.safetensors.index.json"

// rewriteShard writes the shard at src to dst in MLX's layout; with pad
// >= 0 it adds the pad tensor so the data section starts at pad mod 16.
func rewriteShard(src, dst string, pad int) error {
	f, err := safetensors.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	var ts []safetensors.NewTensor
	for _, t := range f.Tensors() {
		ts = append(ts, safetensors.NewTensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: t.Data})
	}
	var seed uint64
	for _, c := range filepath.Base(src) {
		seed = seed*131 + uint64(c)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6d6c78))
	rng.Shuffle(len(ts), func(a, b int) { ts[a], ts[b] = ts[b], ts[a] })
	meta := map[string]string{"format": "mlx"}
	var buf bytes.Buffer
	if pad < 0 {
		if err := safetensors.EncodeMLX(&buf, ts, meta); err != nil {
			return err
		}
		return os.WriteFile(dst, buf.Bytes(), 0o644)
	}
	mid := len(ts) / 2
	for extra := range 16 {
		p := safetensors.NewTensor{Name: PadTensor + strings.Repeat("_", extra), DType: "U8", Shape: []int{padBytes}, Data: []byte{1, 2, 3}}
		with := append(append(append([]safetensors.NewTensor{}, ts[:mid]...), p), ts[mid:]...)
		buf.Reset()
		if err := safetensors.EncodeMLX(&buf, with, meta); err != nil {
			return err
		}
		if (8+binary.LittleEndian.Uint64(buf.Bytes()))%16 == uint64(pad) {
			return os.WriteFile(dst, buf.Bytes(), 0o644)
		}
	}
	return fmt.Errorf("checkpointtest: no pad name puts %s's data at %d mod 16", src, pad)
}

// rewriteIndex copies src's index, if any, to dst with the pad tensor of
// the first shard added to its weight map.
func rewriteIndex(src, dst, first string) error {
	data, err := os.ReadFile(filepath.Join(src, indexFile))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var idx map[string]any
	if err := json.Unmarshal(data, &idx); err != nil {
		return err
	}
	wm, _ := idx["weight_map"].(map[string]any)
	if wm == nil {
		return fmt.Errorf("checkpointtest: %s has no weight_map", filepath.Join(src, indexFile))
	}
	f, err := safetensors.Open(filepath.Join(dst, first))
	if err != nil {
		return err
	}
	for _, t := range f.Tensors() {
		if strings.HasPrefix(t.Name, PadTensor) {
			wm[t.Name] = first
		}
	}
	f.Close()
	out, err := json.MarshalIndent(idx, "", "    ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, indexFile), out, 0o644)
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}
