package cpu

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint/checkpointtest"
)

// TestSaveLoadState: a sequence loaded from a saved state goes on exactly
// as the sequence it was saved from, and reads no more than was written.
func TestSaveLoadState(t *testing.T) {
	m := openTiny(t, checkpointtest.Tiny())
	v := m.cfg.Vocab
	ids := randomTokens(20, v, 3)
	seq, _ := m.NewSequence()
	defer seq.Close()
	if err := seq.Forward(ids[:13], nil); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := seq.(engine.StateSaver).SaveState(&buf); err != nil {
		t.Fatal(err)
	}
	saved := buf.Len()
	buf.WriteString("trailer")
	loaded, err := m.LoadState(&buf, 13)
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	if loaded.Len() != 13 || loaded.Bytes() != int64(saved) || buf.String() != "trailer" {
		t.Fatalf("loaded %d tokens, %d bytes (saved %d), left %q", loaded.Len(), loaded.Bytes(), saved, buf.String())
	}
	want, got := make([]float32, 7*v), make([]float32, 7*v)
	if err := seq.Forward(ids[13:], want); err != nil {
		t.Fatal(err)
	}
	if err := loaded.Forward(ids[13:], got); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got, want); d != 0 {
		t.Errorf("loaded sequence's logits differ by %g", d)
	}

	var short bytes.Buffer
	seq.(engine.StateSaver).SaveState(&short)
	short.Truncate(short.Len() - 1)
	if _, err := m.LoadState(&short, 20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short state: %v", err)
	}
	if _, err := m.LoadState(bytes.NewReader(nil), -1); err == nil {
		t.Error("a negative length loaded")
	}
	if m.StateClass() != "cpu/kv-f32" {
		t.Errorf("class %q", m.StateClass())
	}
}
