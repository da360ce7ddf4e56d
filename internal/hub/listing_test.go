package hub

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"config.json", "model-00001-of-00004.safetensors", "docs/a b.md", "a/b/c/d.txt", ".gitattributes"} {
		if err := checkName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{
		"", ".", "..", "../x", "a/..", "/abs", "a//b", "a/./b", `a\b`, "C:x", "a\tb", "a\x7f", "\xff",
		".petal-manifest.json", "w" + partSuffix, "a/ b", strings.Repeat("a", 256), strings.Repeat("a/", 9) + "b",
	} {
		if err := checkName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzParseListing feeds arbitrary API answers: no panic, and every name
// accepted stays inside the model folder.
func FuzzParseListing(f *testing.F) {
	f.Add([]byte(`{"sha":"0123456789abcdef0123456789abcdef01234567","siblings":[{"rfilename":"config.json","size":3,"blobId":"0123456789abcdef0123456789abcdef01234567"}]}`))
	f.Add([]byte(`{"sha":"0123456789abcdef0123456789abcdef01234567","siblings":[{"rfilename":"../x","size":3,"lfs":{"sha256":"00","size":3}}]}`))
	f.Add([]byte(`{"siblings":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := parseListing(data, "o/n", "main")
		if err != nil {
			return
		}
		for _, file := range l.Files {
			if !filepath.IsLocal(filepath.FromSlash(file.Name)) || file.Size < 0 || file.Size > MaxFileBytes {
				t.Errorf("accepted %+v", file)
			}
		}
	})
}
