package gpumodel

import (
	"petal/engine/checkpoint"
	"petal/gpu/record"
)

// StepReport describes one recorded decode step.
type StepReport struct {
	Position    int   // the position the step decodes (context before it)
	Dispatches  int   // kernels in the step's command buffer
	Levels      int   // dependency levels: runs of dispatches between barriers
	WeightBytes int64 // weight bytes the step reads
}

// TokensPerSecond is the decode rate a memory bandwidth of bytesPerSecond
// would allow if the step's weight reads were all it paid for.
func (r StepReport) TokensPerSecond(bytesPerSecond float64) float64 {
	return bytesPerSecond / float64(r.WeightBytes)
}

// DryRun records the decode step at position pos for a model of cfg's
// shape, without its weights, through the same encoding the drivers run.
func DryRun(cfg *checkpoint.Config, pos int) (StepReport, error) {
	ckpt, err := checkpoint.ShapeOnly(cfg)
	if err != nil {
		return StepReport{}, err
	}
	dev := record.New()
	m, err := New(ckpt, dev)
	if err != nil {
		return StepReport{}, err
	}
	defer m.Close()
	s, err := m.newSequence()
	if err != nil {
		return StepReport{}, err
	}
	defer s.Close()
	if err := s.ensureCapacity(pos + 1); err != nil {
		return StepReport{}, err
	}
	cb, err := dev.NewCommandBuffer()
	if err != nil {
		return StepReport{}, err
	}
	next := s.slot(1)
	if err := s.encode(cb, step{pos: pos, token: s.slot(0), next: &next}); err != nil {
		return StepReport{}, err
	}
	tr := cb.Trace()
	return StepReport{Position: pos, Dispatches: tr.Dispatches(), Levels: tr.Levels(), WeightBytes: ckpt.DecodeWeightBytes()}, nil
}
