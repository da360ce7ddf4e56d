package gpumodel

import (
	"runtime"
	"syscall"
	"time"

	"petal/engine/checkpoint"
	"petal/gpu"
	"petal/gpu/record"
)

// StepReport describes one recorded decode step.
type StepReport struct {
	Position    int   // the position the step decodes (context before it)
	Dispatches  int   // kernels in the step's command buffer
	Levels      int   // dependency levels: runs of dispatches between barriers
	WeightBytes int64 // weight bytes the step reads
	// HostMicros and Allocs are the process's CPU time and heap
	// allocations while encoding the step, averaged over HostSteps
	// encodings on the recording driver (which only counts dispatches).
	HostMicros float64
	Allocs     float64
	// MaxCommandBuffer is the step's cost: a decode command buffer holds
	// one step (a prompt's few steps share one only within the bound).
	MaxCommandBuffer Cost
}

// HostSteps is how many encodings of the step DryRun times.
const HostSteps = 50

// TokensPerSecond is the decode rate a memory bandwidth of bytesPerSecond
// would allow if the step's weight reads were all it paid for.
func (r StepReport) TokensPerSecond(bytesPerSecond float64) float64 {
	return bytesPerSecond / float64(r.WeightBytes)
}

// DryRun records the decode step at position pos for a model of cfg's
// shape, without its weights, through the same encoding the drivers run,
// and times encoding it.
func DryRun(cfg *checkpoint.Config, pos int) (StepReport, error) {
	dev := record.NewCounting()
	m, err := newShapeOnly(cfg, dev)
	if err != nil {
		return StepReport{}, err
	}
	defer m.Close()
	s, err := m.sequenceFor(pos + 1)
	if err != nil {
		return StepReport{}, err
	}
	defer s.Close()
	st := step{pos: pos, token: s.slot(0), next: s.slot(1)}
	cb, err := dev.NewCommandBuffer()
	if err != nil {
		return StepReport{}, err
	}
	if err := s.encode(cb, st); err != nil {
		return StepReport{}, err
	}
	tr := cb.Trace()
	r := StepReport{
		Position: pos, Dispatches: tr.Dispatches(), Levels: tr.Levels(), WeightBytes: m.ckpt.DecodeWeightBytes(),
		MaxCommandBuffer: s.stepCost(st),
	}
	cbs := make([]gpu.CommandBuffer, HostSteps)
	for i := range cbs {
		if cbs[i], err = dev.NewCommandBuffer(); err != nil {
			return StepReport{}, err
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := cpuTime()
	for _, cb := range cbs {
		if err := s.encode(cb, st); err != nil {
			return StepReport{}, err
		}
	}
	elapsed := cpuTime() - start
	runtime.ReadMemStats(&after)
	r.HostMicros = float64(elapsed.Nanoseconds()) / 1e3 / HostSteps
	r.Allocs = float64(after.Mallocs-before.Mallocs) / HostSteps
	return r, nil
}

// cpuTime is the CPU time the process has used, user and system: on a
// loaded machine it counts the encoding's own work where wall time would
// count waiting for a core.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// newShapeOnly is a model of cfg's shape, without its weights, on dev:
// the dry runs' (dev records what they encode).
func newShapeOnly(cfg *checkpoint.Config, dev gpu.Device) (*Model, error) {
	ckpt, err := checkpoint.ShapeOnly(cfg)
	if err != nil {
		return nil, err
	}
	return New(ckpt, dev)
}

// tally is the done func of a dry run's encoding (encodeChunk,
// encodeBatch): it counts each command buffer, its
// dispatches and levels, and keeps the costliest's cost.
func tally(buffers, dispatches, levels *int, costliest *Cost) func(gpu.CommandBuffer, Cost) error {
	return func(cb gpu.CommandBuffer, c Cost) error {
		tr := cb.Trace()
		*buffers++
		*dispatches += tr.Dispatches()
		*levels += tr.Levels()
		if c.M1Millis() > costliest.M1Millis() {
			*costliest = c
		}
		return nil
	}
}
