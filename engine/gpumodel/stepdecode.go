package gpumodel

import (
	"fmt"

	"petal/engine"
	"petal/gpu"
)

// stepVia is how Step runs a pass of decode rows alone (one token each).
type stepVia int

const (
	// viaAuto picks by the rows (decodeSideBySide).
	viaAuto stepVia = iota
	// viaGEMM runs them as one pass of the prefill's GEMMs (runPass).
	viaGEMM
	// viaSideBySide runs them as side-by-side decode steps
	// (stepDecodeRows) whatever their count.
	viaSideBySide
)

// sideBySideMaxRows is the most decode rows Step runs side by side; more
// go as one GEMM pass. On the H200 (BenchmarkStepDecode35B, the 35B after
// 256-token prompts, logits to the host; one row 76 tok/s) side by side
// gave 104, 95 and 73 tok/s at 2, 4 and 8 rows, the small-tile GEMM pass
// 39, 66 and 93: the driver overlaps about two rows' steps, past which
// each row costs nearly a decode step (the 35B's decode kernels fill the
// GPU more than their bandwidth says), while the GEMM pass's cost grows
// slowly with rows. 5 to 7 rows were not measured.
const sideBySideMaxRows = 4

// decodeSideBySide says whether Step runs rows as side-by-side decode
// steps: rows of one token each, up to sideBySideMaxRows of them unless
// via says otherwise.
func decodeSideBySide(rows []engine.Row, via stepVia) bool {
	if via == viaGEMM || (via == viaAuto && len(rows) > sideBySideMaxRows) {
		return false
	}
	for _, r := range rows {
		if len(r.Tokens) != 1 {
			return false
		}
	}
	return true
}

// stepDecodeRows runs rows, one token each, as each row's own decode step
// (the kernels and activations Forward uses for one token, so each row's
// logits are its Forward's; replayed from its plan, as Forward's are)
// encoded side by side: level k of every row's
// step shares one level, so one barrier orders them all and the driver
// may run the rows' dispatches at once (the CUDA driver's graph nodes of a
// level depend only on the level before). The rows touch disjoint
// buffers (each its sequence's activations, caches and state) and share
// only the weights, which they read. Rows whose steps together pass the
// command-buffer bound go in further command buffers, committed in order.
func (m *Model) stepDecodeRows(rows []engine.Row, seqs []*Sequence) error {
	for i, s := range seqs {
		if err := s.ensureTokens(1); err != nil {
			return fmt.Errorf("gpumodel: row %d: %w", i, err)
		}
		s.putTokens(0, rows[i].Tokens)
	}
	err, werr := commitAll(func(done func(gpu.CommandBuffer, Cost) error) error {
		return m.encodeDecodeRows(rows, seqs, done)
	})
	if err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("gpumodel: a batched step of %d decode rows: %w", len(rows), werr)
	}
	for i, s := range seqs {
		s.pos++
		if out := rows[i].Out; len(out) > 0 {
			readFloats(out, s.act.logitsBuf.Contents())
		}
	}
	return nil
}

// encodeDecodeRows encodes the rows' decode steps side by side into
// command buffers within the bound and hands each, with its cost, to done
// (which commits it, or in a dry run counts it); a command buffer done
// refuses is its to recycle.
func (m *Model) encodeDecodeRows(rows []engine.Row, seqs []*Sequence, done func(gpu.CommandBuffer, Cost) error) error {
	var (
		group [][][]planItem // each row's step in levels
		cost  Cost
	)
	flush := func() error {
		cb, err := m.k.Device().NewCommandBuffer()
		if err != nil {
			return err
		}
		if err := encodeSideBySide(cb, group); err != nil {
			gpu.Recycle(cb)
			return err
		}
		c := cost
		group, cost = group[:0], Cost{}
		return done(cb, c)
	}
	for i, s := range seqs {
		items, c, err := s.stepItems(step{pos: s.pos, token: s.slot(0), logits: len(rows[i].Out) > 0})
		if err != nil {
			return fmt.Errorf("gpumodel: row %d: %w", i, err)
		}
		if len(group) > 0 && !m.fits(cost.Plus(c)) {
			if err := flush(); err != nil {
				return err
			}
		}
		group = append(group, levels(items))
		cost = cost.Plus(c)
	}
	return flush()
}

// levels cuts a captured step at its barriers.
func levels(items []planItem) [][]planItem {
	var ls [][]planItem
	start := 0
	for i, it := range items {
		if it.barrier {
			ls = append(ls, items[start:i])
			start = i + 1
		}
	}
	if start < len(items) {
		ls = append(ls, items[start:])
	}
	return ls
}

// encodeSideBySide encodes level k of every step in steps, for k from 0
// until every step is done, a barrier between levels.
func encodeSideBySide(cb gpu.CommandBuffer, steps [][][]planItem) error {
	for k := 0; ; k++ {
		more := false
		for _, st := range steps {
			more = more || k < len(st)
		}
		if !more {
			return nil
		}
		if k > 0 {
			cb.Barrier()
		}
		for _, st := range steps {
			if k >= len(st) {
				continue
			}
			for j := range st[k] {
				if err := cb.Dispatch(&st[k][j].d); err != nil {
					return err
				}
			}
		}
	}
}
