package fit

import (
	"os"
	"path/filepath"
	"testing"

	"petal/engine/checkpoint"
)

// TestDraftBytes: the 35B with its MTP head at 32k tokens on a 64 GB Mac
// counts, for the decoding sequence and each one more beside it, a second
// copy of the DeltaNet states and one attention layer's KV cache (the
// head's); without a head, or with speculation off, nothing.
func TestDraftBytes(t *testing.T) {
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	b, err := SimulatedMac(64)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Context: DefaultContext, CachedSessions: DefaultCachedSessions}
	plain, err := Check(m, b, req)
	if err != nil {
		t.Fatal(err)
	}
	head := m
	head.DraftHead = true
	drafting, err := Check(head, b, req)
	if err != nil {
		t.Fatal(err)
	}
	off, err := Check(head, b, Request{Context: DefaultContext, CachedSessions: DefaultCachedSessions, NoDrafts: true})
	if err != nil {
		t.Fatal(err)
	}
	attn := 0
	for _, k := range m.Config.Layers {
		if k == checkpoint.Attention {
			attn++
		}
	}
	kv := plain.KVBytesPerToken * int64(plain.KVCapacity)
	want := plain.SessionStateBytes + kv/int64(attn)
	t.Logf("a drafting sequence keeps %s more (%s of DeltaNet states, %s of the head's KV cache at %d positions)",
		FormatBytes(want), FormatBytes(plain.SessionStateBytes), FormatBytes(kv/int64(attn)), plain.KVCapacity)
	if plain.DraftBytes != 0 || off.DraftBytes != 0 {
		t.Errorf("draft bytes %d without a head, %d with speculation off; want 0", plain.DraftBytes, off.DraftBytes)
	}
	if off.TotalBytes != plain.TotalBytes {
		t.Errorf("speculation off totals %d, without a head %d", off.TotalBytes, plain.TotalBytes)
	}
	if drafting.DraftBytes != want || want <= plain.SessionStateBytes {
		t.Errorf("draft bytes %d, want %d", drafting.DraftBytes, want)
	}
	if d := drafting.TotalBytes - plain.TotalBytes; d != want {
		t.Errorf("the total grew by %d with drafting, want %d", d, want)
	}
	if d := drafting.SequenceBytes() - plain.SequenceBytes(); d != want {
		t.Errorf("a sequence beside the others grew by %d with drafting, want %d", d, want)
	}
	// A headroom of exactly two plain sequences beside the checked one
	// holds three plain ones, two drafting ones.
	plain.HeadroomBytes = 2 * plain.SequenceBytes()
	drafting.HeadroomBytes = plain.HeadroomBytes
	if p, d := AutoParallel(plain), AutoParallel(drafting); p != 3 || d != 2 {
		t.Errorf("%d plain sequences together, %d drafting; want 3 and 2", p, d)
	}
}

// TestFromCheckpointFindsTheHead: tiny-a has no draft head; with its MTP
// shard (engine/testdata/mtp/tiny-a) beside it, it has one.
func TestFromCheckpointFindsTheHead(t *testing.T) {
	src := filepath.Join("..", "..", "engine", "testdata", "fixtures", "tiny-a")
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(src, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := FromCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.DraftHead {
		t.Error("a folder without the MTP shard has a draft head")
	}
	head, err := os.ReadFile(filepath.Join("..", "..", "engine", "testdata", "mtp", "tiny-a", checkpoint.MTPFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.MTPFile), head, 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err = FromCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	if !m.DraftHead {
		t.Error("a folder with the MTP shard has no draft head")
	}
}
