package fit

import (
	"errors"
	"strings"
	"testing"

	"petal/gpu"
)

func TestForLoad(t *testing.T) {
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	const full = 262144
	for _, tc := range []struct {
		gb      float64
		context int
		want    int // the chosen context; 0: refused
	}{
		{16, full, 0},
		{24, 4096, 0},
		{32, full, 65536},
		{32, 131072, 65536},
		{32, 65536, 65536},
		{32, 8192, 8192},
		{36, full, full},
		{48, full, full},
		{64, full, full},
	} {
		b, err := SimulatedMac(tc.gb)
		if err != nil {
			t.Fatal(err)
		}
		asked := Request{Context: tc.context, CachedSessions: DefaultCachedSessions}
		r, err := ForLoad(m, b, asked)
		if tc.want == 0 {
			var nf *NoFitError
			if !errors.As(err, &nf) || !errors.Is(err, ErrDoesNotFit) {
				t.Fatalf("%g GB at %d: %v, want a NoFitError", tc.gb, tc.context, err)
			}
			msg := err.Error()
			if nf.Report.Verdict != No || !strings.Contains(msg, `verdict "no"`) || !strings.Contains(msg, FormatBytes(b.Bytes)) {
				t.Errorf("%g GB at %d: verdict %s, message %q", tc.gb, tc.context, nf.Report.Verdict, msg)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%g GB at %d: %v", tc.gb, tc.context, err)
		}
		// The chosen context must itself be what Check calls a fit, with
		// the headroom left there.
		at, err := Check(m, b, Request{Context: tc.want, CachedSessions: DefaultCachedSessions})
		if err != nil {
			t.Fatal(err)
		}
		if r.Context != tc.want || r.Verdict != Fits || r != at {
			t.Errorf("%g GB at %d: chose %d (%s), want %d: %+v", tc.gb, tc.context, r.Context, r.Verdict, tc.want, r)
		}
		if r.HeadroomBytes < 0 || r.HeadroomBytes != b.Bytes-r.TotalBytes {
			t.Errorf("%g GB at %d: headroom %d of %d, total %d", tc.gb, tc.context, r.HeadroomBytes, b.Bytes, r.TotalBytes)
		}
		// Twice the chosen context must not fit, unless it was the asked
		// one or beyond the model: otherwise a larger one was missed.
		if next := 2 * r.Context; r.Context < tc.context && next <= full {
			if c, _ := Check(m, b, Request{Context: next, CachedSessions: DefaultCachedSessions}); c.Verdict == Fits {
				t.Errorf("%g GB at %d: chose %d but %d fits", tc.gb, tc.context, r.Context, next)
			}
		}
	}
	if _, err := ForLoad(m, Budget{Bytes: 64 * GiB}, Request{Context: full + 1}); err == nil || errors.Is(err, ErrDoesNotFit) {
		t.Errorf("a context beyond the model: %v, want a plain error", err)
	}
}

func TestNoFitErrorNamesLargestContext(t *testing.T) {
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	// A budget that holds 1024 tokens of context but not MinContext.
	small, err := Check(m, Budget{Bytes: 40 * GiB, Source: "test"}, Request{Context: 1024})
	if err != nil {
		t.Fatal(err)
	}
	b := Budget{Bytes: small.TotalBytes, Source: "test"}
	_, err = ForLoad(m, b, Request{Context: MinContext})
	var nf *NoFitError
	if !errors.As(err, &nf) || nf.Report.MaxContext != 1024 || !strings.Contains(err.Error(), "largest context that fits is 1024 tokens") {
		t.Errorf("got %v", err)
	}
}

// TestDeviceBudget: the budget is the working set the device that will
// run the model reports, and a device that reports none is no budget.
func TestDeviceBudget(t *testing.T) {
	b, err := Device(gpu.Info{Name: "Apple M4 Pro", RecommendedMaxWorkingSetSize: 27 << 30})
	if err != nil || b.Bytes != 27<<30 || !strings.Contains(b.Source, "Apple M4 Pro") {
		t.Errorf("Device: %+v, %v", b, err)
	}
	if b, err := Device(gpu.Info{Name: "a device without a figure"}); !errors.Is(err, ErrNoBudget) {
		t.Errorf("a device reporting no working set: %+v, %v", b, err)
	}
}
