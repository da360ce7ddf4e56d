package fit

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/gpumodel"
	"petal/gpu/record"
)

// TestCopiesOfMisalignedWeights: a folder in MLX's unpadded layout costs
// the GPU backend copies at load; the check counts exactly the bytes the
// backend copies (measured by loading it on the recording driver) into the
// total, and reports them. The padded fixture costs none.
func TestCopiesOfMisalignedWeights(t *testing.T) {
	src := filepath.Join("..", "..", "engine", "testdata", "fixtures", "tiny-a")
	padded, err := FromCheckpoint(src)
	if err != nil {
		t.Fatal(err)
	}
	if padded.CopiedBytes != 0 {
		t.Errorf("padded fixture: %d bytes to copy", padded.CopiedBytes)
	}
	dir := t.TempDir()
	if err := checkpointtest.RewriteMLX(src, dir, 1); err != nil {
		t.Fatal(err)
	}
	m, err := FromCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gpumodel.Open(dir, record.New())
	if err != nil {
		t.Fatal(err)
	}
	loaded := g.CopiedBytes()
	g.Close()
	if m.CopiedBytes != loaded || loaded == 0 {
		t.Fatalf("the check counts %d copied bytes, the GPU load copies %d (> 0)", m.CopiedBytes, loaded)
	}
	budget := Budget{Bytes: 64 << 30, Source: "test"}
	with, err := Check(m, budget, Request{Context: 4096})
	if err != nil {
		t.Fatal(err)
	}
	m.CopiedBytes = 0
	without, err := Check(m, budget, Request{Context: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if with.TotalBytes-without.TotalBytes != loaded || with.MisalignedCopyBytes != loaded {
		t.Errorf("total grows by %d, report says %d copied; want %d", with.TotalBytes-without.TotalBytes, with.MisalignedCopyBytes, loaded)
	}
	var fields map[string]any
	b, _ := json.Marshal(with)
	if err := json.Unmarshal(b, &fields); err != nil || fields["misaligned_copy_bytes"] != float64(loaded) {
		t.Errorf("JSON misaligned_copy_bytes = %v, want %d", fields["misaligned_copy_bytes"], loaded)
	}
}
