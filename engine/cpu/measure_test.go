package cpu

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestMeasureDecodeRead(t *testing.T) {
	rate, err := MeasureDecodeRead(context.Background(), measureMinTime)
	if err != nil {
		t.Fatal(err)
	}
	// Between a slow memory bus and more than any machine's memory reads.
	if math.IsNaN(rate) || rate < 1e8 || rate > 1e13 {
		t.Fatalf("rate %.3g bytes/s", rate)
	}
	t.Logf("%.2f GB/s", rate/1e9)
}

func TestMeasureDecodeReadRefuses(t *testing.T) {
	if _, err := MeasureDecodeRead(context.Background(), measureMinTime-1); !errors.Is(err, ErrMeasureTime) {
		t.Fatalf("a run shorter than %v: got %v, want ErrMeasureTime", measureMinTime, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if _, err := MeasureDecodeRead(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled run: got %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("a cancelled hour-long run took %v", took)
	}
}

// TestColdCopiesOutgrowCaches: the copies hold measureColdBytes at least,
// each the measured shape, and do not share memory (shared memory would
// stay in a cache and time a cache's reads).
func TestColdCopiesOutgrowCaches(t *testing.T) {
	ms := coldCopies()
	if total := len(ms) * ms[0].bytes(); total < measureColdBytes-ms[0].bytes() {
		t.Fatalf("%d copies of %d bytes: %d bytes, want about %d", len(ms), ms[0].bytes(), total, measureColdBytes)
	}
	if &ms[0].words[0] == &ms[1].words[0] || &ms[0].scales[0] == &ms[1].scales[0] {
		t.Fatal("copies share their weights")
	}
	out := make([]float32, measureRows)
	x := make([]float32, measureCols)
	for i := range x {
		x[i] = 1
	}
	ms[1].mul(newScratch(), 0, x, 1, out)
	for i, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("out[%d] = %v", i, v)
		}
	}
}
