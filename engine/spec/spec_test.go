package spec

import (
	"math"
	"testing"
	"time"
)

// TestSampledIsExact: over uniform draws on a fine grid, the token the
// rule leaves at the position is distributed as p, whatever q drafted,
// and a rule that always accepted (q's distribution) is told apart.
func TestSampledIsExact(t *testing.T) {
	const grid = 400
	cases := []struct{ p, q []float64 }{
		{[]float64{0.5, 0.3, 0.2, 0}, []float64{0.1, 0.1, 0.2, 0.6}},
		{[]float64{0.25, 0.25, 0.25, 0.25}, []float64{0.25, 0.25, 0.25, 0.25}},
		{[]float64{0, 1, 0, 0}, []float64{0, 0, 1, 0}},         // greedy, a wrong draft
		{[]float64{0.7, 0, 0.3, 0}, []float64{0.7, 0, 0.3, 0}}, // filtered alike
	}
	for ci, c := range cases {
		got := make([]float64, len(c.p))
		for d, qd := range c.q {
			if qd == 0 {
				continue
			}
			for a := range grid {
				for r := range grid {
					v := Sampled(c.p, c.q, d, (float64(a)+0.5)/grid, (float64(r)+0.5)/grid)
					if v.Accepted && v.Token != d {
						t.Fatalf("case %d: verdict %+v for draft %d", ci, v, d)
					}
					got[v.Token] += qd / grid / grid
				}
			}
		}
		for i := range got {
			if math.Abs(got[i]-c.p[i]) > 2.0/grid {
				t.Errorf("case %d: token %d at %.4f, want %.4f (q %.2f)", ci, i, got[i], c.p[i], c.q[i])
			}
		}
	}
}

func TestDraw(t *testing.T) {
	w := []float64{0, 2, 0, 6}
	for _, tc := range []struct {
		u    float64
		want int
	}{{0, 1}, {0.24, 1}, {0.26, 3}, {0.999, 3}} {
		if got := Draw(w, tc.u); got != tc.want {
			t.Errorf("Draw(%v, %v) = %d, want %d", w, tc.u, got, tc.want)
		}
	}
}

// TestPolicy: drafting that yields more tokens per second stays on; one
// that does not goes off after its probe, is tried again after probeEvery
// plain steps, then after twice as many; Off and Always never change.
func TestPolicy(t *testing.T) {
	const plain = 10 * time.Millisecond
	run := func(p *Policy, verify time.Duration, accepted bool, steps int) (drafts int) {
		for range steps {
			if p.Draft() {
				drafts++
				p.Verified(accepted, verify)
			} else {
				p.Plain(plain)
			}
		}
		return drafts
	}
	good := NewPolicy(Auto, nil)
	if d, want := run(good, 12*time.Millisecond, true, 1000), (1000-learnSteps)*remeasure/(remeasure+1); d < want-1 || d > want+1 {
		t.Errorf("a draft that pays: %d of %d steps drafted, want %d (a plain one in %d)", d, 1000-learnSteps, want, remeasure+1)
	}
	// A verify step slower than two plain ones never pays: the probe
	// stops after minProbe steps.
	slow := NewPolicy(Auto, nil)
	if d := run(slow, 25*time.Millisecond, true, learnSteps+minProbe+probeEvery); d != minProbe {
		t.Errorf("a verify step of 2.5 plain ones: %d drafts, want %d", d, minProbe)
	}
	bad := NewPolicy(Auto, nil)
	if d := run(bad, 13*time.Millisecond, false, learnSteps+probeSteps+probeEvery); d != probeSteps {
		t.Errorf("a draft that never stands: %d drafts, want the probe's %d", d, probeSteps)
	}
	if d := run(bad, 13*time.Millisecond, false, probeSteps+2*probeEvery); d != probeSteps {
		t.Errorf("second probe: %d drafts, want %d then %d plain steps", d, probeSteps, 2*probeEvery)
	}
	// Half the drafts standing at 1.3 plain steps a verify: 1.5/1.3 > 1.
	half := NewPolicy(Auto, nil)
	n := 0
	for range 500 {
		if half.Draft() {
			n++
			half.Verified(n%2 == 0, 13*time.Millisecond)
		} else {
			half.Plain(plain)
		}
	}
	if !half.Pays() || n < 400 {
		t.Errorf("half accepted at 1.3x: pays %v, %d drafts", half.Pays(), n)
	}
	if run(NewPolicy(Off, nil), time.Millisecond, true, 100) != 0 || run(NewPolicy(Always, nil), time.Second, false, 100) != 100 {
		t.Error("Off drafted or Always did not")
	}
	for _, s := range []string{"auto", "off", "on"} {
		if m, ok := ParseMode(s); !ok || m.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, ok)
		}
	}
	if _, ok := ParseMode("sometimes"); ok {
		t.Error("ParseMode accepted sometimes")
	}
}

// TestPolicyMemory: a decode that starts from a Memory where drafting paid
// drafts from its first step; one where it did not waits probeEvery plain
// steps; the Memory follows the last decode's means.
func TestPolicyMemory(t *testing.T) {
	mem := &Memory{}
	first := NewPolicy(Auto, mem)
	for range learnSteps {
		first.Plain(10 * time.Millisecond)
	}
	for range probeSteps {
		first.Verified(true, 12*time.Millisecond)
	}
	if next := NewPolicy(Auto, mem); !next.Draft() {
		t.Error("a decode after one where drafting paid does not draft at once")
	}
	bad := NewPolicy(Auto, mem)
	for range 3 * probeSteps {
		if bad.Draft() {
			bad.Verified(false, 19*time.Millisecond)
		}
	}
	next := NewPolicy(Auto, mem)
	drafts := 0
	for range probeEvery {
		if next.Draft() {
			drafts++
		}
		next.Plain(10 * time.Millisecond)
	}
	if drafts != 0 {
		t.Errorf("after a decode where drafting stopped paying: %d drafts in %d steps", drafts, probeEvery)
	}
}
