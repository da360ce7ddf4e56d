package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"petal/engine"
	"petal/engine/backend"
	"petal/engine/checkpoint"
	"petal/engine/gpumodel"
	"petal/engine/spec"
	"petal/internal/runtime"
)

func init() {
	commands["bench"] = command{
		summary: "prefill and decode speed by the reference engine's contract (JSON), or with --dry-run what the GPU encodes and moves per step",
		run:     runBench,
	}
}

// The reference engine's benchmark contract (REFERENCE-ENGINE.md 7.1):
// batch 1, greedy, a synthetic prompt, a fresh process per arm, one
// warm-up of the exact shape, one measured prefill (to the first token,
// the first decode step already submitted) and 64 measured decode steps,
// an FNV-1a digest of the decoded ids.
const (
	benchSchemaVersion = 1
	// benchDecodeSteps is the contract's count of measured decode steps.
	benchDecodeSteps = 64
	// benchWarmupSteps are the decode steps of the warm-up after its
	// prefill: one delivered, one looked ahead, as the reference does.
	benchWarmupSteps = 2
	// benchGolden is the multiplier of the synthetic prompt: token i is
	// uint32(i * benchGolden) mod vocab.
	benchGolden      = 2654435761
	benchPromptKind  = "u32_golden_ratio_hash_mod_vocab"
	benchDigestKind  = "fnv1a64 over the decoded ids as uint32 little-endian"
	benchMinContext  = 1
	benchMaxContext  = 1 << 20
	benchMaxArms     = 64
	benchContextsAll = "all"
)

// benchMatrix is the reference engine's list of contexts, for --contexts all.
var benchMatrix = []int{256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072}

// Memory bandwidths the dry run converts bytes into rates for when
// --bandwidth is not given: M4 Max (546 GB/s) and M5 Max-class (614 GB/s).
var dryRunBandwidths = []float64{546e9, 614e9}

// benchPrompt is the contract's synthetic prompt of n tokens.
func benchPrompt(n, vocab int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = int(uint64(uint32(uint32(i)*uint32(benchGolden))) % uint64(vocab))
	}
	return ids
}

// benchDigest is the FNV-1a 64 hash of ids, each as a little-endian uint32.
func benchDigest(ids []int) string {
	h := fnv.New64a()
	var b [4]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		h.Write(b[:])
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// benchReport is petal bench's JSON output.
type benchReport struct {
	SchemaVersion int        `json:"schema_version"`
	Backend       string     `json:"backend"`
	Model         string     `json:"model"`
	PromptKind    string     `json:"prompt_kind"`
	DigestKind    string     `json:"digest_kind"`
	Arms          []benchArm `json:"arms"`
}

// benchArm is one context's measurement, made in a process of its own.
type benchArm struct {
	Context int          `json:"context"`
	Prefill benchPrefill `json:"prefill"`
	Decode  benchDecode  `json:"decode"`
	// Speculative is the same context decoded with the MTP head's drafts
	// (--speculative auto or on), measured in a process of its own.
	Speculative *benchSpeculative `json:"speculative,omitempty"`
	// ImageEncode is the vision tower over a 1024x768 image, for a model
	// that reads images.
	ImageEncode *benchImage `json:"image_encode,omitempty"`
}

type benchPrefill struct {
	WallSecs     float64 `json:"wall_secs"`
	TokS         float64 `json:"tok_s"`
	FirstTokenID int     `json:"first_token_id"`
}

type benchDecode struct {
	Steps        int       `json:"steps"`
	WallSecs     float64   `json:"wall_secs"`
	TokS         float64   `json:"tok_s"`
	StepWallSecs []float64 `json:"step_wall_secs"`
	TokenDigest  string    `json:"token_digest"`
	TokenIDs     []int     `json:"token_ids"`
	// Drafted and Accepted count the MTP head's drafts verified and those
	// that stood, when the arm drafted.
	Drafted  int `json:"drafted,omitempty"`
	Accepted int `json:"accepted,omitempty"`
}

func runBench(args []string, stdout io.Writer) error {
	fs := newFlags("bench", os.Stderr)
	dir, backendName := modelFlags(fs, "checkpoint folder (with --dry-run, only config.json is read; default: the Qwen3.6-35B-A3B shape)")
	dry := fs.Bool("dry-run", false, "record one GPU decode step and one prefill chunk instead of running anything")
	context := fs.Int("context", 0, "dry run: the step's and the chunk's position (at the model's end, its last step and chunk); run: one prompt length (instead of --contexts)")
	contexts := fs.String("contexts", "256", "run: comma-separated prompt lengths, one arm (process) each, or 'all' for 256..131072")
	steps := fs.Int("steps", benchDecodeSteps, "run: measured decode steps (the contract's 64)")
	arm := fs.Bool("arm", false, "run: measure one context in this process and print its JSON (the parent runs each arm so)")
	bandwidth := fs.Float64("bandwidth", 0, "dry run: memory bandwidth in GB/s to convert bytes into rates (default: 546 and 614)")
	chunk := fs.Int("chunk", gpumodel.DefaultPrefillChunk, "dry run: tokens of the recorded prefill chunk")
	asJSON := fs.Bool("json", false, "dry run: print JSON instead of text (a run always prints JSON)")
	specFlag := speculativeFlag(fs, spec.Off)
	concurrency := fs.String("concurrency", "", fmt.Sprintf("run: comma-separated stream counts (1 to %d), one arm (process) each per context: that many sequences decode together, one batched step for all per token", benchMaxConcurrency))
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *context < 0 || *steps < 1 || *bandwidth < 0 {
		return errors.New("--context must be >= 0, --steps >= 1 and --bandwidth >= 0")
	}
	mode, err := parseSpeculative(*specFlag)
	if err != nil {
		return err
	}
	var streams []int
	if *concurrency != "" {
		if *dry {
			return errors.New("--concurrency measures a run; the dry run records one sequence's step")
		}
		var err error
		if streams, err = parseConcurrency(*concurrency); err != nil {
			return err
		}
	}
	if *dry {
		bws := dryRunBandwidths
		if *bandwidth > 0 {
			bws = []float64{*bandwidth * 1e9}
		}
		return dryRun(*dir, *context, *chunk, bws, *asJSON, stdout)
	}
	ctxs, err := parseContexts(*contexts)
	if err != nil {
		return err
	}
	if *context > 0 {
		ctxs = []int{*context}
	}
	if *arm {
		if len(ctxs) != 1 || len(streams) > 1 {
			return errors.New("--arm measures one context at one concurrency")
		}
		if len(streams) == 1 {
			a, err := benchConcurrentArm(*dir, *backendName, ctxs[0], streams[0], *steps)
			if err != nil {
				return err
			}
			return json.NewEncoder(stdout).Encode(a)
		}
		a, err := benchOneArm(*dir, *backendName, ctxs[0], *steps, mode)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(a)
	}
	if err := backend.Check(*backendName); err != nil {
		return err
	}
	// Said here, as an arm's process would say it on stderr and end as
	// "exit status 1".
	if err := runtime.CheckDir(*dir); err != nil {
		return fmt.Errorf("%w (a run measures a checkpoint; --dry-run sizes the 35B shape without one)", err)
	}
	armArgs := func(c int) []string {
		return []string{"bench", "--arm", "--model", *dir, "--backend", *backendName, "--context", strconv.Itoa(c), "--steps", strconv.Itoa(*steps)}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if streams != nil {
		rep, err := benchConcurrency(*dir, *backendName, ctxs, streams, armArgs)
		if err != nil {
			return err
		}
		return enc.Encode(rep)
	}
	rep := benchReport{SchemaVersion: benchSchemaVersion, Backend: *backendName, Model: *dir, PromptKind: benchPromptKind, DigestKind: benchDigestKind}
	for _, c := range ctxs {
		var a benchArm
		if err := runArm(armArgs(c), &a); err != nil {
			return fmt.Errorf("arm at context %d: %w", c, err)
		}
		if mode != spec.Off {
			if a.Speculative, err = benchSpeculativeArm(append(armArgs(c), "--speculative", mode.String()), mode, a.Decode); err != nil {
				return fmt.Errorf("speculative arm at context %d: %w", c, err)
			}
		}
		rep.Arms = append(rep.Arms, a)
	}
	return enc.Encode(rep)
}

// parseContexts reads --contexts.
func parseContexts(s string) ([]int, error) {
	if s == benchContextsAll {
		return benchMatrix, nil
	}
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < benchMinContext || n > benchMaxContext {
			return nil, fmt.Errorf("--contexts: %q is not a prompt length in [%d,%d]", p, benchMinContext, benchMaxContext)
		}
		out = append(out, n)
	}
	if len(out) > benchMaxArms {
		return nil, fmt.Errorf("--contexts: %d arms, at most %d", len(out), benchMaxArms)
	}
	return out, nil
}

// runArmProcess runs one arm in a fresh process of this binary (so no
// arm inherits another's caches, pipelines or heap) and returns its
// output. Tests replace it to run arms in process.
var runArmProcess = func(args []string) ([]byte, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// runArm runs one arm's process and decodes its JSON into a.
func runArm(args []string, a any) error {
	out, err := runArmProcess(args)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, a); err != nil {
		return fmt.Errorf("reading the arm's output: %w", err)
	}
	return nil
}

// benchOneArm loads the model, warms up on the exact shape, then measures
// a fresh sequence.
func benchOneArm(dir, backend string, context, steps int, mode spec.Mode) (benchArm, error) {
	m, err := runtime.OpenModel(dir, backend)
	if err != nil {
		return benchArm{}, err
	}
	defer m.Close()
	cfg := m.Config()
	if p := cfg.MaxPositions; p > 0 && context+steps+1 > p {
		return benchArm{}, fmt.Errorf("context %d plus %d steps exceeds the model's %d positions", context, steps, p)
	}
	prompt := benchPrompt(context, cfg.Vocab)
	// The warm-up's measures carry to the measured run, as the server's
	// replies carry theirs.
	mem := &spec.Memory{}
	if _, _, _, err := benchRun(m, prompt, benchWarmupSteps, mode, mem); err != nil {
		return benchArm{}, fmt.Errorf("warm-up: %w", err)
	}
	times, ids, st, err := benchRun(m, prompt, steps, mode, mem)
	if err != nil {
		return benchArm{}, err
	}
	a := benchArm{Context: context}
	a.Prefill.WallSecs = times[0].Seconds()
	a.Prefill.TokS = float64(context) / a.Prefill.WallSecs
	a.Prefill.FirstTokenID = ids[0]
	d := &a.Decode
	d.Steps = steps
	for i := 1; i <= steps; i++ {
		d.StepWallSecs = append(d.StepWallSecs, (times[i] - times[i-1]).Seconds())
	}
	d.WallSecs = (times[steps] - times[0]).Seconds()
	d.TokS = float64(steps) / d.WallSecs
	d.TokenIDs = ids[1:]
	d.TokenDigest = benchDigest(d.TokenIDs)
	d.Drafted, d.Accepted = st.Drafted, st.Accepted
	if a.ImageEncode, err = benchImageEncode(m, dir); err != nil {
		return benchArm{}, fmt.Errorf("image encode: %w", err)
	}
	return a, nil
}

// benchRun feeds prompt to a fresh sequence through the decode loop the
// server runs (greedy, so on the device where the backend can) and decodes
// steps tokens after the first (drafting with the model's head by mode),
// returning when each of the 1+steps tokens was in hand (measured from the
// start), the tokens and the loop's counts.
func benchRun(m engine.Model, prompt []int, steps int, mode spec.Mode, mem *spec.Memory) ([]time.Duration, []int, engine.DecodeStats, error) {
	seq, err := m.NewSequence()
	if err != nil {
		return nil, nil, engine.DecodeStats{}, err
	}
	defer seq.Close()
	times := make([]time.Duration, 0, steps+1)
	ids := make([]int, 0, steps+1)
	start := time.Now()
	st, err := engine.Run(context.Background(), seq, m.Config().Vocab, &engine.Decode{
		Prompt: prompt, MaxTokens: steps + 1, Speculate: mode, SpecMemory: mem,
		Token: func(id int) (bool, error) {
			times = append(times, time.Since(start))
			ids = append(ids, id)
			return false, nil
		},
	})
	if err == nil && len(ids) != steps+1 {
		err = fmt.Errorf("decoded %d tokens, want %d", len(ids), steps+1)
	}
	return times, ids, st, err
}

// dryRunReport is what --dry-run prints, as text or (--json) JSON.
type dryRunReport struct {
	Model   string        `json:"model"`
	Decode  dryRunDecode  `json:"decode_step"`
	Prefill dryRunPrefill `json:"prefill_chunk"`
	// Batched is the batched decode step (engine.Stepper) of 1 to
	// benchMaxConcurrency sequences at the decode step's position.
	Batched []dryRunBatch `json:"batched_decode_steps"`
}

// dryRunBatch is one batched decode step of Rows sequences; its rates are
// the rows' aggregate tokens per second.
type dryRunBatch struct {
	Rows             int          `json:"rows"`
	CommandBuffers   int          `json:"command_buffers"`
	Dispatches       int          `json:"dispatches"`
	Levels           int          `json:"dependency_levels"`
	WeightBytes      int64        `json:"weight_bytes"`
	BytesMoved       int64        `json:"bytes_moved"`
	Rates            []dryRunRate `json:"rates"`
	MaxCommandBuffer dryRunWork   `json:"max_command_buffer"`
}

type dryRunDecode struct {
	Position    int          `json:"position"`
	Dispatches  int          `json:"dispatches"`
	Levels      int          `json:"dependency_levels"`
	WeightBytes int64        `json:"weight_bytes"`
	BytesMoved  int64        `json:"bytes_moved"`
	Rates       []dryRunRate `json:"rates"`
	// HostMicros and Allocs are the host's CPU time and allocations of
	// encoding the step (gpumodel.StepReport).
	HostMicros float64 `json:"host_us_per_step"`
	Allocs     float64 `json:"allocs_per_step"`
	// MaxCommandBuffer is the step's command buffer's work.
	MaxCommandBuffer dryRunWork `json:"max_command_buffer"`
}

type dryRunPrefill struct {
	Position    int          `json:"position"`
	Tokens      int          `json:"tokens"`
	Dispatches  int          `json:"dispatches"`
	Levels      int          `json:"dependency_levels"`
	WeightBytes int64        `json:"weight_bytes"`
	BytesMoved  int64        `json:"bytes_moved"`
	Rates       []dryRunRate `json:"rates"`
	// CommandBuffers is how many the chunk is cut into, MaxCommandBuffer
	// the costliest one's work.
	CommandBuffers   int        `json:"command_buffers"`
	MaxCommandBuffer dryRunWork `json:"max_command_buffer"`
}

// dryRunWork is a command buffer's estimated work (gpumodel.Cost) and the
// time the smallest supported GPU, the base M1, takes for it at its full
// rate.
type dryRunWork struct {
	Flops   int64   `json:"flops"`
	Bytes   int64   `json:"bytes"`
	EstMsM1 float64 `json:"est_ms_m1"`
}

func work(c gpumodel.Cost) dryRunWork {
	return dryRunWork{Flops: c.Flops, Bytes: c.Bytes, EstMsM1: c.M1Millis()}
}

// dryRunRate is what a bandwidth allows: tokens per second if the weights
// alone (decode only) or all the bytes moved were what a step paid for.
type dryRunRate struct {
	GBps            float64 `json:"gb_per_s"`
	WeightBoundTokS float64 `json:"weight_bound_tok_s,omitempty"`
	MovedTokS       float64 `json:"moved_tok_s"`
}

func dryRun(dir string, pos, chunk int, bandwidths []float64, asJSON bool, w io.Writer) error {
	cfg, name := checkpoint.Qwen36(), "Qwen3.6-35B-A3B (built-in shape)"
	if dir != "" {
		c, err := checkpoint.ReadConfig(dir)
		if err != nil {
			return err
		}
		cfg, name = c, dir
	}
	// A context at the model's end records its last step and the chunk
	// that ends at its last position.
	decodePos, prefillPos := pos, pos
	if last := cfg.MaxPositions; last > 0 {
		decodePos, prefillPos = min(pos, last-1), max(0, min(pos, last-chunk))
	}
	r, err := gpumodel.DryRun(cfg, decodePos)
	if err != nil {
		return err
	}
	p, err := gpumodel.DryRunPrefill(cfg, prefillPos, chunk)
	if err != nil {
		return err
	}
	rep := dryRunReport{
		Model: name,
		Decode: dryRunDecode{
			Position: r.Position, Dispatches: r.Dispatches, Levels: r.Levels,
			WeightBytes: r.WeightBytes, BytesMoved: r.WeightBytes + gpumodel.DecodeCacheBytes(cfg, decodePos),
			HostMicros: r.HostMicros, Allocs: r.Allocs, MaxCommandBuffer: work(r.MaxCommandBuffer),
		},
		Prefill: dryRunPrefill{
			Position: p.Position, Tokens: p.Tokens, Dispatches: p.Dispatches, Levels: p.Levels,
			WeightBytes: p.WeightBytes, BytesMoved: p.BytesMoved(),
			CommandBuffers: p.CommandBuffers, MaxCommandBuffer: work(p.MaxCommandBuffer),
		},
	}
	for rows := 1; rows <= benchMaxConcurrency; rows++ {
		b, err := gpumodel.DryRunStep(cfg, decodePos, rows)
		if err != nil {
			return err
		}
		br := dryRunBatch{Rows: rows, CommandBuffers: b.CommandBuffers, Dispatches: b.Dispatches, Levels: b.Levels,
			WeightBytes: b.WeightBytes, BytesMoved: b.BytesMoved(), MaxCommandBuffer: work(b.MaxCommandBuffer)}
		for _, bw := range bandwidths {
			br.Rates = append(br.Rates, dryRunRate{GBps: bw / 1e9, MovedTokS: b.TokensPerSecond(bw)})
		}
		rep.Batched = append(rep.Batched, br)
	}
	for _, bw := range bandwidths {
		rep.Decode.Rates = append(rep.Decode.Rates, dryRunRate{GBps: bw / 1e9, WeightBoundTokS: r.TokensPerSecond(bw), MovedTokS: bw / float64(rep.Decode.BytesMoved)})
		rep.Prefill.Rates = append(rep.Prefill.Rates, dryRunRate{GBps: bw / 1e9, MovedTokS: p.TokensPerSecond(bw)})
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	d := rep.Decode
	fmt.Fprintf(w, "model:                %s\n", name)
	fmt.Fprintf(w, "decode step at position %d (one command buffer)\n", d.Position)
	printWork(w, d.MaxCommandBuffer)
	fmt.Fprintf(w, "dispatches:           %d\n", d.Dispatches)
	fmt.Fprintf(w, "dependency levels:    %d\n", d.Levels)
	fmt.Fprintf(w, "host encoding:        %.0f µs CPU, %.0f allocations per step (mean of %d on the recording driver)\n", d.HostMicros, d.Allocs, gpumodel.HostSteps)
	fmt.Fprintf(w, "weight bytes read:    %d (%.3f GB)\n", d.WeightBytes, float64(d.WeightBytes)/1e9)
	for _, rt := range d.Rates {
		fmt.Fprintf(w, "bound at %3.0f GB/s:    %.1f tokens/s\n", rt.GBps, rt.WeightBoundTokS)
	}
	fmt.Fprintf(w, "bytes moved:          %d (%.3f GB: weights, KV rows read, DeltaNet state read and written)\n", d.BytesMoved, float64(d.BytesMoved)/1e9)
	for _, rt := range d.Rates {
		fmt.Fprintf(w, "moved at %3.0f GB/s:    %.1f tokens/s\n", rt.GBps, rt.MovedTokS)
	}
	f := rep.Prefill
	fmt.Fprintf(w, "prefill chunk of %d tokens after position %d (%d command buffers)\n", f.Tokens, f.Position, f.CommandBuffers)
	printWork(w, f.MaxCommandBuffer)
	fmt.Fprintf(w, "dispatches:           %d (%.1f per token)\n", f.Dispatches, float64(f.Dispatches)/float64(f.Tokens))
	fmt.Fprintf(w, "dependency levels:    %d\n", f.Levels)
	fmt.Fprintf(w, "weight bytes read:    %d (%.3f GB)\n", f.WeightBytes, float64(f.WeightBytes)/1e9)
	fmt.Fprintf(w, "bytes moved:          %d (%.3f GB: weights, KV rows read once per attention threadgroup's tokens, DeltaNet state; not activations)\n", f.BytesMoved, float64(f.BytesMoved)/1e9)
	for _, rt := range f.Rates {
		fmt.Fprintf(w, "moved at %3.0f GB/s:    %.1f prompt tokens/s\n", rt.GBps, rt.MovedTokS)
	}
	fmt.Fprintf(w, "batched decode steps at position %d (rows: sequences decoding together; tokens/s for all rows, if the bytes moved were all a step paid for)\n", d.Position)
	fmt.Fprintf(w, "rows  command buffers  dispatches  levels  bytes moved (GB)")
	for _, rt := range d.Rates {
		fmt.Fprintf(w, "  tok/s at %3.0f GB/s", rt.GBps)
	}
	fmt.Fprintln(w)
	for _, b := range rep.Batched {
		fmt.Fprintf(w, "%4d  %15d  %10d  %6d  %16.3f", b.Rows, b.CommandBuffers, b.Dispatches, b.Levels, float64(b.BytesMoved)/1e9)
		for _, rt := range b.Rates {
			fmt.Fprintf(w, "  %18.1f", rt.MovedTokS)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// printWork says what the costliest command buffer carries.
func printWork(w io.Writer, c dryRunWork) {
	fmt.Fprintf(w, "largest command buffer: %.3g flops, %.3g bytes: %.1f ms on a base M1 at full rate\n", float64(c.Flops), float64(c.Bytes), c.EstMsM1)
}
