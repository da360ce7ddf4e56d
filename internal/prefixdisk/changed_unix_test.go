//go:build unix

package prefixdisk

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// These hold on Unix, where a file removed or renamed over stays readable
// through a descriptor opened before; Windows refuses both while the file
// is open.

// TestFileChangedWhileRead: a file evicted or renamed over (by another
// process) while it is read is read whole as it was opened; a damaged one
// replaced meanwhile by a whole one is not loaded, and the whole one stays.
func TestFileChangedWhileRead(t *testing.T) {
	long := seq(30)
	for _, tc := range []struct {
		name    string
		damaged bool
		change  func(t *testing.T, path string)
		want    int  // tokens loaded
		kept    bool // whether a file stays under path
	}{
		{"evicted", false, func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, 30, false},
		{"renamed over", false, func(t *testing.T, path string) { replace(t, path, long) }, 30, true},
		{"damaged, renamed over", true, func(t *testing.T, path string) { replace(t, path, long) }, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			save(t, dir, modelA, long[:10])
			path := save(t, dir, modelA, long)
			if tc.damaged {
				flip(t, path, -1)
			}
			s, l := open(t, dir, 1<<30)
			changed := false
			// The first payload read is changed under path halfway.
			halfThen := func(r io.Reader, n int) (blob, error) {
				first := make([]byte, len(payload(n))/2)
				if changed {
					first = nil
				} else if _, err := io.ReadFull(r, first); err != nil {
					return blob{closed: new(bool)}, err
				} else {
					tc.change(t, path)
					changed = true
				}
				rest, err := io.ReadAll(r)
				return blob{data: append(first, rest...), closed: new(bool)}, err
			}
			v, n := Load(s, modelA, long, 0, halfThen)
			if n != tc.want || !bytes.Equal(v.data, payload(tc.want)) {
				t.Errorf("loaded %d tokens, want %d (log %q)", n, tc.want, l.text())
			}
			if _, err := os.Stat(path); (err == nil) != tc.kept {
				t.Errorf("file under its name: %v, want kept %v (log %q)", err, tc.kept, l.text())
			}
			if tc.kept {
				checkFile(t, path, long)
			}
		})
	}
}

// replace renames a whole snapshot of tokens over path, with a payload of
// its own, as another process's write ends.
func replace(t *testing.T, path string, tokens []int) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), tempPrefix+"other")
	if err := os.WriteFile(tmp, written(modelA, tokens, []byte("another process's state")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
