package hub

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"petal/internal/hub/hubtest"
)

func TestVerify(t *testing.T) {
	h := hubtest.New(t, fixture)
	o := options(t, h)
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(dir); err != nil {
		t.Fatalf("a fresh pull does not verify: %v", err)
	}
	if !Finished(dir) || Finished(t.TempDir()) {
		t.Error("Finished does not tell a pulled folder from an empty one")
	}
	// One flipped byte in the weights is found.
	weights := filepath.Join(dir, "model-00002-of-00003.safetensors")
	b, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(weights, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Verify(dir); !errors.Is(err, ErrChecksum) {
		t.Fatalf("corrupted weights: %v, want ErrChecksum", err)
	}
	// So is a missing file.
	b[len(b)/2] ^= 1
	if err := os.WriteFile(weights, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	if err := Verify(dir); !errors.Is(err, ErrChecksum) {
		t.Fatalf("missing config.json: %v, want ErrChecksum", err)
	}
	// A folder no pull made is refused.
	if err := Verify(t.TempDir()); !errors.Is(err, ErrInput) {
		t.Fatalf("foreign folder: %v, want ErrInput", err)
	}
}
