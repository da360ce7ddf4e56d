package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/safetensors"
)

// chunkBytes is the unit of work: one worker fills and writes this much
// of one tensor at a time (a multiple of every element size).
const chunkBytes = 4 << 20

const indexFile = "model.safetensors.index.json"

// options are what one run writes.
type options struct {
	dir        string
	shape      shape
	shardBytes int64
	seed       uint64
	workers    int
	// pulled writes each shard as petal pull stores it (see [realign])
	// instead of as the hub serves it.
	pulled bool
}

// written is what a run wrote.
type written struct {
	shards  []string
	tensors int
	bytes   int64 // of the shard files
}

// write writes the checkpoint: config.json, the shards and their index.
// Every tensor's bytes are a function of (seed, tensor, position) alone, so
// the files are the same whatever the number of workers; no tensor is
// ever held whole in memory.
func write(o options) (written, error) {
	ts, overrides := plan(o.shape)
	shards := shardPlan(ts, o.shardBytes)
	var w written
	weightMap := map[string]string{}
	type job struct {
		f   *os.File
		t   *tensor
		off int64 // within the tensor
		at  int64 // in the file
		n   int
	}
	var jobs []job
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for i, sh := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if len(shards) == 1 {
			name = "model.safetensors"
		}
		order := dataOrder(sh, o.seed, name)
		infos := make([]safetensors.Info, len(order))
		for k, t := range order {
			infos[k] = t.Info
		}
		if o.pulled {
			realign(order, infos)
		}
		head, err := safetensors.MLXHead(infos, map[string]string{"format": "mlx"})
		if err != nil {
			return w, err
		}
		if o.pulled {
			head = padHead(head)
		}
		f, err := os.Create(filepath.Join(o.dir, name))
		if err != nil {
			return w, err
		}
		files = append(files, f)
		if _, err := f.Write(head); err != nil {
			return w, err
		}
		for k := range order {
			t := &order[k]
			t.Info = infos[k]
			weightMap[t.Name] = name
			for off := int64(0); off < t.bytes(); off += chunkBytes {
				jobs = append(jobs, job{f: f, t: t, off: off, at: int64(len(head)) + t.Begin + off, n: int(min(chunkBytes, t.bytes()-off))})
			}
			w.bytes += t.bytes()
		}
		w.bytes += int64(len(head))
		w.shards = append(w.shards, name)
		w.tensors += len(order)
	}
	work := make(chan job)
	errs := make(chan error, max(o.workers, 1))
	var wg sync.WaitGroup
	for range max(o.workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, chunkBytes)
			for j := range work {
				b := buf[:j.n]
				fill(j.t, o.seed, j.off, b)
				if _, err := j.f.WriteAt(b, j.at); err != nil {
					errs <- err
					for range work {
					}
					return
				}
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return w, err
	}
	for _, f := range files {
		if err := f.Close(); err != nil {
			return w, err
		}
	}
	files = nil
	if err := writeIndex(o.dir, weightMap, w.bytes); err != nil {
		return w, err
	}
	return w, writeConfig(o.dir, o.shape, overrides)
}

// dataOrder is the order of a shard's data: a shuffle seeded by the shard's
// name, standing in for the hash-map order MLX's writer iterates (so, as
// in a real shard, tensors lie at whatever alignment their predecessors
// leave).
func dataOrder(ts []tensor, seed uint64, name string) []tensor {
	out := append([]tensor(nil), ts...)
	h := seed
	for _, c := range name {
		h = h*131 + uint64(c)
	}
	rng := rand.New(rand.NewPCG(h, 0x6d6c78))
	rng.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
	return out
}

// pullAlign is the boundary petal pull starts a shard's data on, and every
// tensor whose size is a multiple of it (internal/hub's realignBoundary).
const pullAlign = 16

// realign reorders a shard's data as petal pull stores it: by decreasing
// alignment class (the largest power of two up to 16 dividing the
// tensor's size), keeping the order within a class, so packed from a
// 16-byte boundary every tensor lands on its class's boundary.
func realign(order []tensor, infos []safetensors.Info) {
	class := func(n int64) int64 { return min(n&-n, pullAlign) }
	idx := make([]int, len(order))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return class(order[idx[a]].bytes()) > class(order[idx[b]].bytes()) })
	ts, is := append([]tensor(nil), order...), append([]safetensors.Info(nil), infos...)
	for k, i := range idx {
		order[k], infos[k] = ts[i], is[i]
	}
}

// padHead pads the header with spaces, as the format allows, so the data
// section starts on pullAlign.
func padHead(head []byte) []byte {
	for len(head)%pullAlign != 0 {
		head = append(head, ' ')
	}
	binary.LittleEndian.PutUint64(head, uint64(len(head)-8))
	return head
}

// mix is splitmix64's finaliser: a stateless hash from a position to 64
// random bits.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// unit is a uniform value in [0, 1) for element i of stream seed.
func unit(seed, i uint64) float64 {
	return float64(mix(seed*0x100000001b3^mix(i))>>11) / (1 << 53)
}

func sqrt(x float64) float64 { return math.Sqrt(x) }

// codeSpread is the standard deviation of a code drawn uniformly from
// 0..2^bits-1: a group's scale is the weights' standard deviation over it.
func codeSpread(bits int) float64 {
	n := float64(int(1) << bits)
	return sqrt((n*n - 1) / 12)
}

// groupScales are the bf16 scales a module's groups draw from, each with
// the bf16 bias that centres its codes on zero: w = scale*q + bias has
// mean 0 and standard deviation std*(0.75..1.25) over uniform codes q.
// A group takes a byte of a hash of (seed, group/8) as its entry, so the
// scales cost little more to write than the codes.
func groupScales(t *tensor) (scales, biases [256]uint16) {
	for k := range scales {
		s := t.std / codeSpread(t.bits) * (0.75 + 0.5*float64(k)/255)
		scales[k] = checkpointtest.BF16(float32(s))
		held := float64(math.Float32frombits(uint32(scales[k]) << 16))
		biases[k] = checkpointtest.BF16(float32(-held * float64(int(1)<<t.bits-1) / 2))
	}
	return scales, biases
}

// fill writes bytes [off, off+len(b)) of tensor t into b.
func fill(t *tensor, seed uint64, off int64, b []byte) {
	switch t.kind {
	case fillCodes:
		// Any bits are valid codes; a stream per chunk keeps chunks
		// independent.
		rng := rand.NewPCG(mix(seed^t.seed<<20), uint64(off))
		i := 0
		for ; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
		}
		for x := rng.Uint64(); i < len(b); i++ {
			b[i], x = byte(x), x>>8
		}
	case fillScales, fillBiases:
		table, biases := groupScales(t)
		if t.kind == fillBiases {
			table = biases
		}
		// One hash gives eight groups their entries.
		var x uint64
		for i := 0; i < len(b); i += 2 {
			g := uint64(off/2) + uint64(i/2)
			if i == 0 || g%8 == 0 {
				x = mix(t.seed<<40 ^ g/8)
			}
			binary.LittleEndian.PutUint16(b[i:], table[byte(x>>(8*(g%8)))])
		}
	case fillBF16:
		for i := 0; i < len(b); i += 2 {
			v := t.lo + (t.hi-t.lo)*unit(t.seed, uint64(off/2)+uint64(i/2))
			binary.LittleEndian.PutUint16(b[i:], checkpointtest.BF16(float32(v)))
		}
	case fillF32, fillLogF32:
		for i := 0; i < len(b); i += 4 {
			v := t.lo + (t.hi-t.lo)*unit(t.seed, uint64(off/4)+uint64(i/4))
			if t.kind == fillLogF32 {
				v = math.Log(v)
			}
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(v)))
		}
	}
}

func writeIndex(dir string, weightMap map[string]string, total int64) error {
	if len(weightMap) == 0 {
		return errors.New("synth35b: no tensors")
	}
	data, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "    ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, indexFile), data, 0o644)
}

// writeConfig writes config.json as mlx-community's conversion ships it:
// the multimodal wrapper, the text model under text_config, the
// quantization block (and its quantization_config copy) with the 8-bit
// router gates.
func writeConfig(dir string, s shape, overrides map[string]int) error {
	quant := map[string]any{"group_size": s.group, "bits": s.defaultBits, "mode": "affine"}
	keys := make([]string, 0, len(overrides))
	for k := range overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		quant[k] = map[string]int{"group_size": s.group, "bits": overrides[k]}
	}
	text := map[string]any{
		"model_type": "qwen3_5_moe_text", "hidden_size": s.hidden, "num_hidden_layers": len(s.layers),
		"layer_types": s.layers, "full_attention_interval": s.fullAttentionInterval, "vocab_size": s.vocab,
		"num_attention_heads": s.heads, "num_key_value_heads": s.kvHeads, "head_dim": s.headDim,
		"attn_output_gate": true, "attention_bias": false, "attention_dropout": 0.0, "hidden_act": "silu",
		"linear_num_key_heads": s.linKeyHeads, "linear_num_value_heads": s.linValueHeads,
		"linear_key_head_dim": s.linKeyDim, "linear_value_head_dim": s.linValueDim, "linear_conv_kernel_dim": s.linConvKernel,
		"num_experts": s.experts, "num_experts_per_tok": s.topK, "moe_intermediate_size": s.expertInter,
		"shared_expert_intermediate_size": s.sharedInter, "norm_topk_prob": true, "rms_norm_eps": 1e-6,
		"rope_parameters": map[string]any{
			"rope_type": "default", "rope_theta": s.ropeTheta, "partial_rotary_factor": s.partialRotary,
			"mrope_section": s.mropeSection, "mrope_interleaved": true,
		},
		"max_position_embeddings": s.maxPositions, "tie_word_embeddings": false, "initializer_range": 0.02,
		"router_aux_loss_coef": 0.001, "output_router_logits": false, "use_cache": true,
		"dtype": "bfloat16", "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1,
		"mtp_use_dedicated_embeddings": false, "eos_token_id": s.textEOS,
	}
	cfg := map[string]any{
		"architectures": []string{"Qwen3_5MoeForConditionalGeneration"}, "model_type": "qwen3_5_moe",
		"text_config": text,
		"vision_config": map[string]any{
			"model_type": "qwen3_5_moe", "depth": s.visionDepth, "hidden_size": s.visionHidden,
			"patch_size": s.visionPatch, "out_hidden_size": s.visionOutHidden,
			"intermediate_size": s.visionInter, "num_heads": s.visionHeads, "in_channels": s.visionChannels,
			"temporal_patch_size": s.visionTemporal, "spatial_merge_size": s.visionMerge,
			"num_position_embeddings": s.visionPositions, "hidden_act": "gelu_pytorch_tanh",
		},
		"image_token_id": s.imageToken, "vision_start_token_id": s.visionStart, "vision_end_token_id": s.visionEnd,
		"tie_word_embeddings": false, "eos_token_id": s.eos,
		"quantization": quant, "quantization_config": quant,
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
}
