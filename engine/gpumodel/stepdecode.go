package gpumodel

import (
	"fmt"

	"petal/engine"
	"petal/gpu"
	"petal/shaders"
)

// stepVia is how Step runs a pass of decode rows alone (one token each).
type stepVia int

const (
	// viaAuto picks by the rows (decodePath).
	viaAuto stepVia = iota
	// viaGEMM runs them as one pass of the prefill's GEMMs (runPass).
	viaGEMM
	// viaSideBySide runs them as side-by-side decode steps
	// (stepDecodeRows) whatever their count.
	viaSideBySide
	// viaRows runs them as one pass of the multi-row matrix-vector
	// products (pass.vec), up to shaders.QMVRowsMaxTokens of them.
	viaRows
)

// decodePath is how Step runs rows under via: rows of several tokens take
// the GEMM pass; decode rows alone take via's way, or by default the rows
// pass up to shaders.QMVRowsMaxTokens rows (its kernels keep an
// accumulator per row) and the GEMM pass past it. On the H200
// (BenchmarkStepDecode35B: the synthetic 35B after 256-token prompts, 128
// steps, logits to the host) the rows pass took 14.2, 21.0 and 33.4 ms a
// step at 2, 4 and 8 rows (141.1, 190.4 and 239.7 tok/s aggregate; one
// row, Forward, 12.4 ms and 80.9 tok/s), where side by side took 20.2,
// 45.1 and 109.9 ms (the driver overlaps about two rows' steps; past them
// each row costs nearly a decode step) and the small-tile GEMM pass 51.7,
// 66.1 and 86.8 ms (its token tiles mostly empty, their simdgroup
// products emulated over a warp).
func decodePath(rows []engine.Row, via stepVia) stepVia {
	for _, r := range rows {
		if len(r.Tokens) != 1 {
			return viaGEMM
		}
	}
	switch {
	case via == viaGEMM || via == viaSideBySide:
		return via
	case len(rows) <= shaders.QMVRowsMaxTokens:
		return viaRows
	default:
		return viaGEMM
	}
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
