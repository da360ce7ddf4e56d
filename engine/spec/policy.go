package spec

import (
	"sync"
	"time"
)

// Mode says when a decode drafts.
type Mode int

const (
	// Off never drafts: the decode runs exactly as without a head.
	Off Mode = iota
	// Auto drafts while it pays (Policy).
	Auto
	// Always drafts at every step (tests, and bench's measure of it).
	Always
)

// ParseMode reads a --speculative value: "auto", "off" or "on" (Always).
func ParseMode(s string) (Mode, bool) {
	switch s {
	case "auto", "":
		return Auto, true
	case "off":
		return Off, true
	case "on":
		return Always, true
	}
	return Off, false
}

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Always:
		return "on"
	}
	return "off"
}

// The policy's constants. A draft pays when the tokens a verify step
// yields (1, plus 1 when the draft stands) per its time (the draft's and
// the step's) beat one token per plain step's time.
const (
	// learnSteps plain steps first measure a plain step's time.
	learnSteps = 4
	// probeSteps verify steps measure acceptance and a verify step's
	// time before the policy judges; it stops a probe after minProbe
	// when even drafts that all stood would not pay.
	probeSteps = 8
	minProbe   = 2
	// probeEvery is how many plain steps pass before drafting is tried
	// again once it did not pay; each failed try doubles it, up to
	// maxProbeEvery, so a head that never pays costs at most
	// probeSteps verify steps per maxProbeEvery tokens.
	probeEvery    = 64
	maxProbeEvery = 1024
	// remeasure: while drafting, one step in remeasure is a plain one,
	// so that a plain step's mean follows the machine (a stale one, from
	// the slow first steps after a prompt, kept a loss on).
	remeasure = 16
	// weight is the share of the newest measure in the running means.
	weight = 0.125
	// margin is how much faster drafting must be than plain steps to
	// be kept on: a measure's noise must not keep a loss.
	margin = 1.02
)

// Policy decides, step by step for one decode, whether to draft. It keeps
// running means of a plain step's time, a verify step's (draft included)
// and the share of drafts accepted.
type Policy struct {
	mode             Mode
	mem              *Memory
	plain, verify    float64 // seconds, running means (0: not measured)
	accept           float64
	plainN, verifyN  int
	on               bool
	probeLeft, until int // verify steps left in a probe; plain steps before the next
	every            int
	sincePlain       int  // verify steps since the last plain one
	warm             bool // the first plain step, slower, was left out
}

// NewPolicy returns the policy of a decode in mode m. It starts from what
// mem (nil: nothing) learned of the decodes before on the same model:
// drafting at once when that paid, else after probeEvery plain steps;
// without it, it learns a plain step's time first.
func NewPolicy(m Mode, mem *Memory) *Policy {
	p := &Policy{mode: m, mem: mem, every: probeEvery, until: learnSteps}
	if mem == nil {
		return p
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if mem.plain == 0 || mem.verify == 0 {
		return p
	}
	p.plain, p.verify, p.accept = mem.plain, mem.verify, mem.accept
	p.plainN, p.verifyN = learnSteps, probeSteps
	if p.Pays() {
		p.on = true
	} else {
		p.until = probeEvery
	}
	return p
}

// Memory carries a model's running means from one decode's Policy to
// the next decodes', so that a short reply need not learn them again. It
// is safe for concurrent use.
type Memory struct {
	mu                    sync.Mutex
	plain, verify, accept float64
}

// keep stores p's means in its Memory.
func (p *Policy) keep() {
	if p.mem == nil {
		return
	}
	p.mem.mu.Lock()
	defer p.mem.mu.Unlock()
	if p.plainN > 0 {
		p.mem.plain = p.plain
	}
	if p.verifyN > 0 {
		p.mem.verify, p.mem.accept = p.verify, p.accept
	}
}

// Draft reports whether the next step drafts.
func (p *Policy) Draft() bool {
	switch p.mode {
	case Off:
		return false
	case Always:
		return true
	}
	return p.on && p.sincePlain < remeasure
}

// Plain records a plain decode step of duration d.
func (p *Policy) Plain(d time.Duration) {
	// The first decode step after a prompt grows buffers and finds cold
	// caches; counted, it made plain steps look slower than they are and
	// kept drafts that did not pay.
	if !p.warm && p.plainN == 0 {
		p.warm = true
		p.until--
		return
	}
	p.plain = mean(p.plain, d.Seconds(), p.plainN)
	p.plainN++
	p.sincePlain = 0
	p.keep()
	if p.on {
		return
	}
	if p.until--; p.until <= 0 {
		p.on, p.probeLeft = true, probeSteps
	}
}

// Verified records a verify step of duration d (the draft included) and
// whether its draft stood.
func (p *Policy) Verified(accepted bool, d time.Duration) {
	a := 0.0
	if accepted {
		a = 1
	}
	p.verify = mean(p.verify, d.Seconds(), p.verifyN)
	p.accept = mean(p.accept, a, p.verifyN)
	p.verifyN++
	p.sincePlain++
	p.keep()
	if p.probeLeft > 0 {
		p.probeLeft--
	}
	if !p.on {
		return
	}
	if p.probeLeft > 0 && (probeSteps-p.probeLeft < minProbe || p.couldPay()) {
		return // the probe goes on
	}
	if p.Pays() {
		p.every = probeEvery
		return
	}
	p.on, p.until = false, p.every
	p.every = min(2*p.every, maxProbeEvery)
}

// Pays reports whether drafting yields more tokens per second than plain
// steps by the running means.
func (p *Policy) Pays() bool {
	if p.plain == 0 || p.verify == 0 {
		return false
	}
	return (1+p.accept)/p.verify > margin/p.plain
}

// couldPay reports whether drafting would pay were every draft to stand.
func (p *Policy) couldPay() bool {
	return p.plain > 0 && 2/p.verify > margin/p.plain
}

// Acceptance is the running share of drafts accepted.
func (p *Policy) Acceptance() float64 { return p.accept }

// mean folds x into the running mean m of n measures: the plain mean for
// the first few, then an exponential one that follows changes.
func mean(m, x float64, n int) float64 {
	if n < int(1/weight) {
		return (m*float64(n) + x) / float64(n+1)
	}
	return m + weight*(x-m)
}
