package fit

import "testing"

// TestAutoParallelOnMacs: the 35B on 32, 64 and 128 GB Macs, at 32k tokens
// of context and at the whole 262k (lowered where it does not fit): the
// auto count's sequences fit in what the check leaves, one more would not
// (or the count is at MaxAutoParallel), and a Mac with more memory never
// gets fewer.
func TestAutoParallelOnMacs(t *testing.T) {
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	for _, ctx := range []int{DefaultContext, m.Config.MaxPositions} {
		prev := 0
		for _, gb := range []float64{32, 64, 128} {
			b, err := SimulatedMac(gb)
			if err != nil {
				t.Fatal(err)
			}
			r, err := ForLoad(m, b, Request{Context: ctx, CachedSessions: DefaultCachedSessions})
			if err != nil {
				t.Fatal(err)
			}
			n := AutoParallel(r)
			t.Logf("%g GB Mac, context %d (asked %d): %s left, %s a sequence: %d together", gb, r.Context, ctx,
				FormatBytes(r.HeadroomBytes), FormatBytes(r.SequenceBytes()), n)
			if n < 1 || n > MaxAutoParallel {
				t.Fatalf("%g GB: %d together, outside 1..%d", gb, n, MaxAutoParallel)
			}
			if n > 1 && ParallelBytes(r, n) > r.HeadroomBytes {
				t.Errorf("%g GB: %d together take %s beyond the check, %s is left", gb, n, FormatBytes(ParallelBytes(r, n)), FormatBytes(r.HeadroomBytes))
			}
			if n < MaxAutoParallel && ParallelBytes(r, n+1) <= r.HeadroomBytes {
				t.Errorf("%g GB: %d together, but %d fit in %s", gb, n, n+1, FormatBytes(r.HeadroomBytes))
			}
			if r.SequenceBytes() < r.KVBytesPerToken*int64(r.Context) {
				t.Errorf("%g GB: a sequence counted at %s, less than its KV cache at %d tokens", gb, FormatBytes(r.SequenceBytes()), r.Context)
			}
			if n < prev {
				t.Errorf("%g GB: %d together, fewer than a smaller Mac's %d", gb, n, prev)
			}
			prev = n
		}
	}
}

// TestAutoParallelBounds: no room, or a report without sequence sizes,
// is one at a time; room for many stops at MaxAutoParallel.
func TestAutoParallelBounds(t *testing.T) {
	const seq = 1 << 20
	for _, c := range []struct {
		headroom, kv int64
		want         int
	}{
		{-seq, seq, 1}, {0, seq, 1}, {seq - 1, seq, 1}, {seq, seq, 2}, {3*seq - 1, seq, 3},
		{3 * seq, seq, MaxAutoParallel}, {1000 * seq, seq, MaxAutoParallel}, {1000 * seq, 0, 1},
	} {
		r := Report{HeadroomBytes: c.headroom, KVBytes: c.kv}
		if got := AutoParallel(r); got != c.want {
			t.Errorf("headroom %d, sequence %d: %d together, want %d", c.headroom, c.kv, got, c.want)
		}
	}
}
