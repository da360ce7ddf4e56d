package cpu

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"petal/engine"
)

// streamRead is what this machine's memory delivers to a streaming read
// over both cores: the goroutines of parallelFor sum a buffer far larger
// than the caches with the vector dot kernel against a vector that stays
// in L1. BenchmarkQMV interleaves its passes with the products, so that
// the two rates come from the same seconds: on this host the read alone
// moved between 8.8 and 19 GB/s from one run to the next.
type streamRead struct {
	buf, probe []float32
	sc         *scratch
	next       int // which eighth the next pass reads
	bytes      int64
	took       time.Duration
}

const (
	readFloats = 128 << 20 // 512 MiB
	readChunk  = 4096      // floats a task range sums
	// readPass is the floats one pass reads, an eighth of the buffer
	// (shorter passes read slower here: 32 MiB ones 10-25% below the whole
	// buffer's rate in the same seconds, 64 MiB ones at its rate).
	readPass = readFloats / 8
)

func newStreamRead() *streamRead {
	buf := make([]float32, readFloats)
	for i := range buf {
		buf[i] = float32(i & 7)
	}
	return &streamRead{buf: buf, probe: make([]float32, readChunk), sc: newScratch()}
}

// pass reads the next eighth of the buffer, timed, once wake has woken
// the workers.
func (r *streamRead) pass() {
	lo := r.next * readPass
	wake(r.sc)
	task := &readTask{buf: r.buf[lo : lo+readPass], probe: r.probe}
	start := time.Now()
	r.sc.parallelFor(readPass/readChunk, 1, task)
	r.took += time.Since(start)
	r.bytes += 4 * readPass
	r.next = (r.next + 1) % (readFloats / readPass)
}

func (r *streamRead) reset() { r.bytes, r.took = 0, 0 }

// rate is the bytes/s of the passes since reset.
func (r *streamRead) rate() float64 { return float64(r.bytes) / r.took.Seconds() }

// wake hands every worker of sc a piece of nothing and waits for them:
// they then poll for spinFor, where a piece handed to a blocked one, as
// they are after the timer stopped, starts up to 300 us late.
func wake(sc *scratch) { sc.parallelFor(len(sc.parts), 1, nothing{}) }

type nothing struct{}

func (nothing) run(*part, int, int) {}

type readTask struct{ buf, probe []float32 }

func (r *readTask) run(_ *part, lo, hi int) {
	n := len(r.probe)
	for c := lo; c < hi; c++ {
		dot(r.buf[c*n:(c+1)*n], r.probe)
	}
}

// BenchmarkQMV measures the quantized matrix-vector product at the 35B
// model's common shapes; bytes/s counts the packed weights, scales and
// biases read. After every readEvery bytes of products the timer stops
// for a pass of streamRead (read-GB/s), and of-read-bw is the products'
// rate over the read's, the products timed from after the workers are
// woken (b.StartTimer stops the world for tens of microseconds first, so
// the workers may have blocked again).
func BenchmarkQMV(b *testing.B) {
	read := newStreamRead()
	for _, c := range []struct{ rows, cols, bits int }{
		{2048, 2048, 4}, {8192, 2048, 4}, {2048, 4096, 4}, {256, 2048, 8},
	} {
		b.Run(fmt.Sprintf("rows=%d/cols=%d/bits=%d", c.rows, c.cols, c.bits), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			m := randomQuant(r, c.rows, c.cols, c.bits, 64)
			// Decode reads each weight once per token, so the products
			// cycle through copies that together outgrow the caches.
			size := 4*len(m.words) + 2*len(m.scales) + 2*len(m.biases)
			copies := make([]*matrix, max(1, coldBytes/size))
			for i := range copies {
				cp := *m
				cp.words = slices.Clone(m.words)
				cp.scales = slices.Clone(m.scales)
				cp.biases = slices.Clone(m.biases)
				copies[i] = &cp
			}
			x := randomFloats(r, c.cols)
			out := make([]float32, c.rows)
			work := newScratch()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			read.reset()
			b.ResetTimer()
			var took time.Duration
			wake(work)
			start, since := time.Now(), 0
			for i := range b.N {
				copies[i%len(copies)].mul(work, 0, x, 1, out)
				if since += size; since >= readEvery {
					took += time.Since(start)
					b.StopTimer()
					read.pass()
					b.StartTimer()
					wake(work)
					start, since = time.Now(), 0
				}
			}
			took += time.Since(start)
			b.StopTimer()
			if read.bytes == 0 {
				read.pass()
			}
			b.ReportMetric(read.rate()/1e9, "read-GB/s")
			b.ReportMetric(float64(size)*float64(b.N)/took.Seconds()/read.rate(), "of-read-bw")
		})
	}
}

// readEvery is the product bytes between two passes of streamRead: a pass
// (64 MiB) takes about as long as these products, a few milliseconds.
const readEvery = 96 << 20

// coldBytes is how much weight memory BenchmarkQMV cycles through: far more
// than any cache of the machines it runs on.
const coldBytes = 512 << 20

// BenchmarkQMM measures the product of a 4-bit matrix with a chunk of
// prompt tokens, the prefill's shape: tok/s is tokens through the matrix.
func BenchmarkQMM(b *testing.B) {
	for _, tokens := range []int{8, 64} {
		b.Run(fmt.Sprintf("rows=2048/cols=2048/tokens=%d", tokens), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			m := randomQuant(r, 2048, 2048, 4, 64)
			x := randomFloats(r, tokens*2048)
			out := make([]float32, tokens*2048)
			work := newScratch()
			b.ReportAllocs()
			for b.Loop() {
				m.mul(work, 0, x, tokens, out)
			}
			b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkDecode measures one decode step (one token, last-position
// logits) after a 64-token prompt on each fixture. GB/s counts the weight
// bytes a step reads (checkpoint.Model.DecodeWeightBytes), GB/cpu-s the
// same per second of CPU.
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"tiny-a", "real-heads"} {
		b.Run("fixture="+name, func(b *testing.B) {
			m, err := Open(fixturesDir + "/" + name)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			benchDecode(b, m, 64)
		})
	}
	b.Run("model=demo/context=256", func(b *testing.B) { benchDecode(b, openDemo(b, 16384), 256) })
	// A checkpoint too large for the repository, such as the real
	// dimensions at 2 layers (go run ./tools/synth35b --layers 2), is
	// measured from the folder PETAL_BENCH_MODEL names.
	if dir := os.Getenv("PETAL_BENCH_MODEL"); dir != "" {
		b.Run("model=env/context=256", func(b *testing.B) {
			m, err := Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			benchDecode(b, m, 256)
		})
	}
}

// benchDecode times decode steps of m after a prompt of context tokens.
func benchDecode(b *testing.B, m *Model, context int) {
	seq, _ := m.NewSequence()
	logits := make([]float32, m.cfg.Vocab)
	if err := seq.Forward(randomTokens(context, m.cfg.Vocab, 1), logits); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(m.ckpt.DecodeWeightBytes())
	b.ReportAllocs()
	cpu := cpuTime()
	next := 1
	for b.Loop() {
		if err := seq.Forward([]int{next}, logits); err != nil {
			b.Fatal(err)
		}
		next = (next + 1) % m.cfg.Vocab
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	cpus := cpuTime() - cpu
	b.ReportMetric(float64(b.N)/cpus, "tok/cpu-s")
	b.ReportMetric(float64(m.ckpt.DecodeWeightBytes())*float64(b.N)/cpus/1e9, "GB/cpu-s")
}

// BenchmarkStep measures batched decode on the demo model: each op is
// one Step of a decode row (last-position logits) for each of streams
// sequences, each after its own prompt of stepContext tokens. tok/s is
// the tokens of all streams per second, the figure batching raises.
func BenchmarkStep(b *testing.B) {
	const stepContext = 256
	m := openDemo(b, 16384)
	v := m.cfg.Vocab
	for _, streams := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("model=demo/context=%d/streams=%d", stepContext, streams), func(b *testing.B) {
			rows := make([]engine.Row, streams)
			for i := range rows {
				seq, _ := m.NewSequence()
				defer seq.Close()
				if err := seq.Forward(randomTokens(stepContext, v, uint64(i+1)), nil); err != nil {
					b.Fatal(err)
				}
				rows[i] = engine.Row{Seq: seq, Tokens: []int{i + 1}, Out: make([]float32, v)}
			}
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				if err := m.Step(rows); err != nil {
					b.Fatal(err)
				}
				for i := range rows {
					rows[i].Tokens[0] = engine.Argmax(rows[i].Out)
				}
			}
			tokens := float64(streams * b.N)
			b.ReportMetric(tokens/b.Elapsed().Seconds(), "tok/s")
			b.ReportMetric(tokens/(cpuTime()-cpu), "tok/cpu-s")
		})
	}
}

// cpuTime is the CPU time this process has used, user and system, in
// seconds: on a machine shared with other work the wall clock measures
// the queue as much as the code, and tok/cpu-s is the rate it would have
// on one core of its own.
func cpuTime() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// demoDir is the embedded demo model (models/demo), the shape the prefill
// targets of issue 20 are set on.
const demoDir = "../../models/demo"

// openDemo opens the demo model's weights with its position limit raised
// to positions: its config allows 4096, and a long prompt is measured on
// the same weights (the speed does not depend on what they learned).
func openDemo(b *testing.B, positions int) *Model {
	dir := b.TempDir()
	raw, err := os.ReadFile(filepath.Join(demoDir, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		b.Fatal(err)
	}
	cfg["text_config"].(map[string]any)["max_position_embeddings"] = positions
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		b.Fatal(err)
	}
	abs, _ := filepath.Abs(filepath.Join(demoDir, "model.safetensors"))
	if err := os.Symlink(abs, filepath.Join(dir, "model.safetensors")); err != nil {
		b.Fatal(err)
	}
	m, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

// BenchmarkPrefill measures a prompt on the demo model to its first
// token's logits (the last position's), as `petal bench` times prefill:
// tok/s is prompt tokens per second, s/prompt the time to first token.
func BenchmarkPrefill(b *testing.B) {
	for _, tokens := range []int{2048, 10240} {
		b.Run(fmt.Sprintf("model=demo/tokens=%d", tokens), func(b *testing.B) {
			m := openDemo(b, 16384)
			prompt := randomTokens(tokens, m.cfg.Vocab, 1)
			logits := make([]float32, m.cfg.Vocab)
			cpu := cpuTime()
			for b.Loop() {
				seq, _ := m.NewSequence()
				if err := seq.Forward(prompt, logits); err != nil {
					b.Fatal(err)
				}
				seq.Close()
			}
			perPrompt := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(tokens)/perPrompt, "tok/s")
			b.ReportMetric(perPrompt, "s/prompt")
			b.ReportMetric((cpuTime()-cpu)/float64(b.N), "cpu-s/prompt")
		})
	}
}

// BenchmarkQMVRows measures the row kernels' products with a few decode
// rows at the demo model's shapes (a batched step's decode rows take them,
// not the tiles), whose weights stay in cache: ns/input is the time of one
// input row's product, which a batch of inputs lowers as far as the
// kernels share the work of a weight row between them; cpu-ns/input the
// same in CPU time, steadier on a shared machine.
func BenchmarkQMVRows(b *testing.B) {
	for _, c := range []struct{ rows, cols int }{{1024, 384}, {6144, 384}, {128, 384}, {384, 128}} {
		for _, inputs := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("rows=%d/cols=%d/inputs=%d", c.rows, c.cols, inputs), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				m := randomQuant(r, c.rows, c.cols, 4, 64)
				x := randomFloats(r, inputs*c.cols)
				outs := make([][]float32, inputs)
				for i := range outs {
					outs[i] = make([]float32, c.rows)
				}
				work := newScratch()
				b.ReportAllocs()
				cpu := cpuTime()
				for b.Loop() {
					m.mulRows(work, 0, x, inputs, 0, outs)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*inputs), "ns/input")
				b.ReportMetric((cpuTime()-cpu)*1e9/float64(b.N*inputs), "cpu-ns/input")
			})
		}
	}
}
