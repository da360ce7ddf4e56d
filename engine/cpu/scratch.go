package cpu

import (
	"slices"
	"sync"
)

// scratch holds the buffers one Forward or Step works in. They grow to
// the largest pass and context seen and are then reused, so that a
// decode step allocates nothing. The Model keeps the idle ones for the
// next Forward or Step of any of its sequences: a sequence waiting in a
// cache holds none, and sequences stepping at once each get their own (a
// Step of several sequences takes one).
type scratch struct {
	x, xn, delta                []float32 // the residual stream, its norm, a block's output
	qg, q, k, v, gate, o        []float32 // attention; o is also DeltaNet's
	u, z, beta, alpha           []float32 // DeltaNet
	logits, xe, g, up, y, sgate []float32 // MoE
	idx                         []int
	uses                        []use
	logitRows                   [][]float32 // the LM head's output rows
	sharedG, sharedUp, sharedY  []float32   // the shared expert's
	act                         []float32   // siluMul's sigmoids
	jobs                        []job       // a Forward's or Step's rows
	tokens                      []int       // a Forward's tokens
	segs                        []seg       // a pass's pieces of them

	// The tasks' operands live here so that they are not allocated per call.
	group  products
	heads  []attnHeads
	attn   attnBatch
	steps  []deltaStep
	deltas deltaBatch
	parts  []part
	wg     sync.WaitGroup
	chunks chunks
}

// part holds the buffers of one range of a parallelFor.
type part struct {
	row, scores, kv, ka []float32
	tile                []float32 // mulQuantTiles' rows of scale*code and biases
	window              []float32 // deltaConv's next conv windows
	wide                []float32 // mulWide's products, a row's four after another's
}

func newScratch() *scratch { return &scratch{parts: make([]part, numParts())} }

// take returns *buf resized to n zeroed elements, reallocating only when
// it is too short (with append's growth, so a buffer growing a little per
// step reallocates rarely).
func take[T any](buf *[]T, n int) []T {
	*buf = slices.Grow((*buf)[:0], n)[:n]
	clear(*buf)
	return *buf
}

// grow is take without the clearing, for a buffer whose every use writes
// what it reads first (attention's scores, up to 16 rows of a context
// each per job: clearing them wrote as much again for nothing).
func grow[T any](buf *[]T, n int) []T {
	*buf = slices.Grow((*buf)[:0], n)[:n]
	return *buf
}

// acquire takes an idle scratch, or makes one for a Forward running
// alongside the others.
func (m *Model) acquire() *scratch {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.idle); n > 0 {
		sc := m.idle[n-1]
		m.idle = m.idle[:n-1]
		return sc
	}
	return newScratch()
}

func (m *Model) release(sc *scratch) {
	m.mu.Lock()
	m.idle = append(m.idle, sc)
	m.mu.Unlock()
}
