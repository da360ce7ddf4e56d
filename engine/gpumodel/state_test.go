package gpumodel

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"petal/engine"
)

// TestSaveLoadState: a sequence saved after part of a prompt and loaded
// into a model opened again (as after a restart) gives the logits of the
// rest within maxLogitDiff of an uninterrupted run, and a short state is
// refused.
func TestSaveLoadState(t *testing.T) {
	dev := openDevice(t)
	m := openFixture(t, dev, "tiny-a")
	v := m.cfg.Vocab
	ids := []int{5, 17, 300, 2, 9, 44, 1, 260, 77, 3, 12, 99}
	const saved = 7

	whole, _ := m.NewSequence()
	defer whole.Close()
	want := make([]float32, len(ids)*v)
	if err := whole.Forward(ids, want); err != nil {
		t.Fatal(err)
	}

	seq, _ := m.NewSequence()
	defer seq.Close()
	if err := seq.Forward(ids[:saved], nil); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := seq.(engine.StateSaver).SaveState(&buf); err != nil {
		t.Fatal(err)
	}
	state := buf.Bytes()

	again := openFixture(t, dev, "tiny-a")
	if again.StateClass() != m.StateClass() {
		t.Fatalf("class %q, then %q", m.StateClass(), again.StateClass())
	}
	loaded, err := again.LoadState(bytes.NewReader(state), saved)
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	if loaded.Len() != saved {
		t.Fatalf("loaded %d tokens", loaded.Len())
	}
	got := make([]float32, (len(ids)-saved)*v)
	if err := loaded.Forward(ids[saved:], got); err != nil {
		t.Fatal(err)
	}
	d := maxDiff(got, want[saved*v:])
	t.Logf("logits after a restored state differ from an uninterrupted run's by at most %g", d)
	if d > maxLogitDiff {
		t.Errorf("logits differ by %g, more than %g", d, maxLogitDiff)
	}

	if _, err := again.LoadState(bytes.NewReader(state[:len(state)-1]), saved); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short state: %v", err)
	}
	if _, err := again.LoadState(bytes.NewReader(state), 0); err == nil {
		t.Error("an empty state loaded")
	}
}
