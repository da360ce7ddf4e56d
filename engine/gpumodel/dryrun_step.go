package gpumodel

import (
	"fmt"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/gpu/record"
)

// BatchReport describes one recorded batched decode step: Rows sequences,
// each decoding one token at Position.
type BatchReport struct {
	Rows, Position int
	CommandBuffers int   // command buffers the step is cut into
	Dispatches     int   // kernels in the step's command buffers
	Levels         int   // dependency levels: runs of dispatches between barriers
	WeightBytes    int64 // weight bytes the step reads: every matrix once, the experts the rows can route to, their embedding rows
	CacheBytes     int64 // every row's KV rows and DeltaNet states (DecodeCacheBytes each)
	// MaxCommandBuffer is the cost of the step's costliest command buffer.
	MaxCommandBuffer Cost
}

// BytesMoved is the step's weight and cache traffic.
func (r BatchReport) BytesMoved() int64 { return r.WeightBytes + r.CacheBytes }

// TokensPerSecond is the aggregate decode rate of the step's rows that a
// memory bandwidth of bytesPerSecond allows if its traffic were all it
// paid for.
func (r BatchReport) TokensPerSecond(bytesPerSecond float64) float64 {
	return float64(r.Rows) * bytesPerSecond / float64(r.BytesMoved())
}

// DryRunStep records the batched decode step (Model.Step) of rows
// sequences at position pos each, logits for every row, for a model of
// cfg's shape, without its weights, through the encoding the drivers run.
// One row is the sequence's decode step, as Step runs it; more one pass,
// as decodePath picks it: up to shaders.QMVRowsMaxTokens rows the
// multi-row matrix-vector products, more the GEMMs. Rows are at most
// DefaultPrefillChunk, one pass.
func DryRunStep(cfg *checkpoint.Config, pos, rows int) (BatchReport, error) {
	if pos < 0 || rows < 1 || rows > DefaultPrefillChunk {
		return BatchReport{}, fmt.Errorf("gpumodel: a batched step of %d rows at position %d (1 to %d rows)", rows, pos, DefaultPrefillChunk)
	}
	m, err := newShapeOnly(cfg, record.New())
	if err != nil {
		return BatchReport{}, err
	}
	defer m.Close()
	r := BatchReport{
		Rows: rows, Position: pos, WeightBytes: m.ckpt.StepWeightBytes(rows),
		CacheBytes: int64(rows) * DecodeCacheBytes(cfg, pos),
	}
	seqs := make([]*Sequence, rows)
	steps := make([]engine.Row, rows)
	for i := range seqs {
		s, err := m.sequenceFor(pos + 1)
		if err != nil {
			return BatchReport{}, err
		}
		defer s.Close()
		s.pos = pos
		seqs[i] = s
		steps[i] = engine.Row{Seq: s, Tokens: []int{0}, Out: make([]float32, cfg.Vocab)}
	}
	count := tally(&r.CommandBuffers, &r.Dispatches, &r.Levels, &r.MaxCommandBuffer)
	if rows == 1 {
		st := step{pos: pos, token: seqs[0].slot(0), logits: true}
		cb, err := m.k.Device().NewCommandBuffer()
		if err != nil {
			return BatchReport{}, err
		}
		if err := seqs[0].encode(cb, st); err != nil {
			return BatchReport{}, err
		}
		return r, count(cb, seqs[0].stepCost(st))
	}
	passes, err := m.passes(steps, seqs, decodePath(steps, viaAuto) == viaRows)
	if err != nil {
		return BatchReport{}, err
	}
	p := &passes[0]
	if err := m.ensureBatch(p); err != nil {
		return BatchReport{}, err
	}
	return r, m.encodeBatch(p, count)
}
