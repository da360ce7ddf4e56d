package doctor

import (
	"fmt"
	"math"

	"petal/engine"
	"petal/engine/cpu"
	"petal/engine/gpumodel"
	"petal/gpu"
	"petal/internal/models"
)

// maxLogitDiff is how far the GPU path's logits may be from the CPU
// backend's with a half-precision KV cache, as engine/gpumodel's tests
// hold it: both compute in fp32 but reduce in other orders.
const maxLogitDiff = 0.01

// demoPrompt runs as a prefill chunk, then demoDecode one token at a time.
var (
	demoPrompt = []int{5, 17, 300, 2, 9, 44, 1, 260}
	demoDecode = []int{77, 3, 1024}
)

// demoCheck names the model check.
const demoCheck = "demo model, GPU path against the CPU backend"

// demo runs the embedded demo model through dev and through the CPU
// backend and compares every position's logits.
func (run *runner) demo(dev gpu.Device) {
	c := Check{Section: SectionModel, Name: demoCheck}
	run.timed(&c, func() (string, error) {
		dir, err := models.DemoDir()
		if err != nil {
			return "", err
		}
		g, err := gpumodel.Open(dir, dev)
		if err != nil {
			return "", err
		}
		defer g.Close()
		cm, err := cpu.OpenWith(dir, cpu.Options{HalfKV: true})
		if err != nil {
			return "", fmt.Errorf("CPU backend: %w", err)
		}
		defer cm.Close()
		want, err := demoLogits(cm, g.Config().Vocab)
		if err != nil {
			return "", fmt.Errorf("CPU backend: %w", err)
		}
		got, err := demoLogits(g, g.Config().Vocab)
		if err != nil {
			return "", err
		}
		worst := 0.0
		for i := range got {
			d := math.Abs(float64(got[i] - want[i]))
			if !(d <= worst) { // NaN too
				worst = d
			}
		}
		positions := len(demoPrompt) + len(demoDecode)
		msg := fmt.Sprintf("max |logit - CPU| = %.3g over %d positions (a %d-token prefill, %d decode steps); tolerance %g",
			worst, positions, len(demoPrompt), len(demoDecode), maxLogitDiff)
		if !(worst <= maxLogitDiff) {
			return "", fmt.Errorf("%s", msg)
		}
		return msg, nil
	})
}

// opener opens a model's sequences.
type opener interface {
	NewSequence() (engine.Sequence, error)
}

// demoLogits runs the prompt and the decode tokens and returns the logits
// of every position.
func demoLogits(m opener, vocab int) ([]float32, error) {
	seq, err := m.NewSequence()
	if err != nil {
		return nil, err
	}
	defer seq.Close()
	out := make([]float32, (len(demoPrompt)+len(demoDecode))*vocab)
	if err := seq.Forward(demoPrompt, out[:len(demoPrompt)*vocab]); err != nil {
		return nil, err
	}
	for i, t := range demoDecode {
		at := (len(demoPrompt) + i) * vocab
		if err := seq.Forward([]int{t}, out[at:at+vocab]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
