package hub

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"petal/internal/hub/hubtest"
)

// TestImportSnapshot imports an MLX-layout checkpoint from a Hugging Face
// cache snapshot, offline: every hash is checked against its blob's name,
// the shards end aligned and strictly valid, small files are linked, and
// the folder counts as a finished pull of that commit.
func TestImportSnapshot(t *testing.T) {
	h, served := mlxServerDir(t, 7)
	cache, blobs := h.HFCache(t)
	t.Setenv(EnvModels, filepath.Join(t.TempDir(), "models"))
	snap := filepath.Join(cache, "models--petal-test--tiny", "snapshots", hubtest.SHA)
	var events int
	rep, err := Import(t.Context(), ImportOptions{Src: snap, Progress: func(ev Event) {
		if ev.Phase == Importing {
			events++
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(ModelsRoot(), "tiny"); rep.Dir != want {
		t.Errorf("imported into %s, want %s", rep.Dir, want)
	}
	if rep.Files != len(h.Files) || rep.Checked != len(h.Files) || rep.Realigned != 3 || events != len(h.Files) {
		t.Errorf("import report %+v, %d events; want %d files all checked, 3 realigned", rep, events, len(h.Files))
	}
	checkPulled(t, h, rep.Dir)
	checkStrict(t, h, rep.Dir)
	checkZeroCopy(t, served, rep.Dir)
	if err := Verify(rep.Dir); err != nil {
		t.Fatal(err)
	}
	a, _ := os.Stat(filepath.Join(rep.Dir, "config.json"))
	b, _ := os.Stat(blobs["config.json"])
	if !os.SameFile(a, b) {
		t.Error("config.json was copied, not linked")
	}
	o := options(t, h)
	o.Dir = rep.Dir
	if _, err := Pull(t.Context(), o); err != nil || h.Listings() != 0 {
		t.Errorf("pull of the imported commit: %v after %d listings; want the folder as it is", err, h.Listings())
	}
}

// TestImportDamagedBlob refuses a snapshot whose blob does not hash to
// its name, and leaves nothing behind.
func TestImportDamagedBlob(t *testing.T) {
	h := mlxServer(t, 2)
	cache, blobs := h.HFCache(t)
	shard := "model-00001-of-00003.safetensors"
	data := bytes.Clone(h.Files[shard])
	data[len(data)/2] ^= 1
	if err := os.WriteFile(blobs[shard], data, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	_, err := Import(t.Context(), ImportOptions{Src: filepath.Join(cache, "models--petal-test--tiny", "snapshots", hubtest.SHA), Dir: dir})
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("import of a damaged blob: %v, want ErrChecksum", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 0 {
		t.Errorf("%d entries left after a failed import", len(entries))
	}
}

// TestImportFolder imports a plain folder as MLX writes one: no hash is
// known, so the ones computed are recorded and Verify uses them.
func TestImportFolder(t *testing.T) {
	h := mlxServer(t, 15)
	src := hubtest.MLXLayout(t, fixture, 15)
	if err := os.MkdirAll(filepath.Join(src, ".cache", "huggingface"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, ".cache", "huggingface", "junk"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o755); err != nil { // an empty folder is taken
		t.Fatal(err)
	}
	rep, err := Import(t.Context(), ImportOptions{Src: src, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 0 || rep.Realigned != 3 || rep.Files != len(h.Files)-1 { // no docs/notes.txt
		t.Errorf("import report %+v", rep)
	}
	if _, err := os.Stat(filepath.Join(dir, ".cache")); err == nil {
		t.Error("a hidden folder was imported")
	}
	delete(h.Files, "docs/notes.txt")
	checkPulled(t, h, dir)
	if err := Verify(dir); err != nil {
		t.Fatal(err)
	}
	damage(t, filepath.Join(dir, "model-00003-of-00003.safetensors"))
	if err := Verify(dir); !errors.Is(err, ErrChecksum) {
		t.Errorf("damaged import: %v, want ErrChecksum", err)
	}
}

func TestImportRefuses(t *testing.T) {
	src := hubtest.MLXLayout(t, fixture, 4)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		o    ImportOptions
		want error
	}{
		{"a missing folder", ImportOptions{Src: filepath.Join(src, "absent"), Dir: filepath.Join(t.TempDir(), "m")}, ErrInput},
		{"a file", ImportOptions{Src: filepath.Join(src, "config.json"), Dir: filepath.Join(t.TempDir(), "m")}, ErrInput},
		{"into itself", ImportOptions{Src: src, Dir: filepath.Join(src, "m")}, ErrInput},
		{"into a folder that holds something", ImportOptions{Src: src, Dir: full}, ErrExists},
		{"a folder that is not a checkpoint", ImportOptions{Src: full, Dir: filepath.Join(t.TempDir(), "m")}, ErrInput},
	} {
		_, err := Import(t.Context(), tc.o)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("import of %s: %v, want %v", tc.what, err, tc.want)
		}
	}
}

// TestImportInPlace realigns a folder that an earlier Petal pulled as the
// Hub serves it (MLX's layout), in place, as the GPU backend's startup
// line suggests: its Hub hashes are checked, it stays a finished pull of
// its commit, and importing it again keeps the realigned shards as they
// are. A damaged shard stops the import and leaves the folder alone.
func TestImportInPlace(t *testing.T) {
	h, served := mlxServerDir(t, 9)
	l, err := fetchListing(t.Context(), http.DefaultClient, h.URL(), h.Repo, hubtest.SHA)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	for name, data := range h.Files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, err := json.Marshal(manifest{Repo: h.Repo, Revision: hubtest.SHA, SHA: hubtest.SHA, Files: l.Files})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, manifestName), old, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, again := range []bool{false, true} {
		rep, err := Import(t.Context(), ImportOptions{Src: dir, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		realigned := 3 // the first time; then they are kept as they are
		if again {
			realigned = 0
		}
		if rep.Checked != len(h.Files) || rep.Realigned != realigned {
			t.Errorf("import (again %v): %+v; want all %d checked, %d realigned", again, rep, len(h.Files), realigned)
		}
		checkPulled(t, h, dir)
		checkZeroCopy(t, served, dir)
		if err := Verify(dir); err != nil {
			t.Fatal(err)
		}
		o := options(t, h)
		o.Dir = dir
		if _, err := Pull(t.Context(), o); err != nil || h.Listings() != 1 {
			t.Errorf("pull after an in-place import: %v after %d listings; want the folder as it is", err, h.Listings())
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if len(entries) != 1 { // the folder alone: no lock file, no staging
		t.Errorf("%d entries beside the folder after the imports", len(entries))
	}
	shard := filepath.Join(dir, "model-00002-of-00003.safetensors")
	b := damage(t, shard)
	if _, err := Import(t.Context(), ImportOptions{Src: dir, Dir: dir}); !errors.Is(err, ErrChecksum) {
		t.Fatalf("import of a damaged folder in place: %v, want ErrChecksum", err)
	}
	if got, err := os.ReadFile(shard); err != nil || !bytes.Equal(got, b) {
		t.Errorf("the damaged folder was changed: %v", err)
	}
}

// damage flips the last byte of the file at path and returns its new
// contents.
func damage(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}
