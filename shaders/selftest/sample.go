package selftest

import (
	"fmt"
	"math"

	"petal/engine/sample"
	"petal/gpu"
	"petal/shaders"
)

// sampleCase draws a few tokens with temperature, top-k, top-p, a logit
// bias and a presence penalty over a masked row, and compares every id and
// logprob with engine/sample's Sampler given the same seed: the same
// Philox draws, bias, cuts and penalties must pick the same ids.
func sampleCase() Case {
	return Case{Name: "sample", Kernels: []string{"sample_f32"}, seed: 31,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const n, allowed, steps, top = 3000, 2900, 4, 5
			p := sample.Params{Temperature: 1, TopK: 20, TopP: 0.95, PresencePenalty: 1.5, RepetitionPenalty: 1, Seed: new(uint64(7))}
			prompt := []int{3, 5, 7}
			// Lifts a prompt id and the last producible one into the
			// best 20, bans another.
			bias := sample.LogitBias{3: 5, 7: -100, allowed - 1: 6}
			logits := e.rand(n, 2)
			s := shaders.Sampling{Logits: e.f32(logits), N: n, Mask: e.buf(shaders.SampleMaskBytes(n)), State: e.buf(shaders.SampleStateBytes(n)), TopLogprobs: top}
			slots, recs := e.buf(4*steps), e.buf(shaders.SampleRecordBytes*steps)
			if e.err == nil {
				if err := shaders.WriteSampleMask(s.Mask.Buf.Contents(), n, allowed); err != nil {
					e.err = err
				} else if err := shaders.WriteSampleState(s.State.Buf.Contents(), n, p, bias, prompt); err != nil {
					e.err = err
				}
			}
			return func(cb gpu.CommandBuffer) error {
					for j := range steps {
						s.Out, s.Record = slots.At(4*j), recs.At(shaders.SampleRecordBytes*j)
						if err := e.k.Sample(cb, s); err != nil {
							return err
						}
						cb.Barrier()
					}
					return nil
				}, func() error {
					ref, err := sample.New(p, sample.Vocab{Size: n, TokenizerSize: allowed}, prompt)
					if err == nil {
						err = ref.SetLogitBias(bias)
					}
					if err != nil {
						return err
					}
					ids := readU32(slots, steps)
					for j := range steps {
						want, lp, err := ref.NextLogprobs(append([]float32(nil), logits...), top)
						if err != nil {
							return err
						}
						rec, err := shaders.ReadSampleRecord(recs.Buf.Contents()[shaders.SampleRecordBytes*j:])
						if err != nil {
							return err
						}
						if int(ids[j]) != want || int(rec.ID) != want {
							return fmt.Errorf("%w: step %d: id %d (record %d), want %d", ErrMismatch, j, ids[j], rec.ID, want)
						}
						if d := math.Abs(float64(rec.Logprob) - lp.Logprob); !(d <= 1e-4) {
							return fmt.Errorf("%w: step %d: logprob %v, want %v", ErrMismatch, j, rec.Logprob, lp.Logprob)
						}
					}
					return nil
				}
		}}
}
