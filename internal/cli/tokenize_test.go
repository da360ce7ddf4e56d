package cli

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTokenize runs `petal tokenize` on the Qwen3 tokenizer.json with a
// text of the tokenizer's golden set and expects the ids the tokenizers
// library gave.
func TestTokenize(t *testing.T) {
	const data = "../../engine/tokenizer/testdata"
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, tokenizeGunzip(t, filepath.Join(data, "qwen3-tokenizer.json.gz")), 0o644); err != nil {
		t.Fatal(err)
	}
	var texts struct {
		Texts []struct{ Name, Text string }
	}
	raw, err := os.ReadFile(filepath.Join(data, "texts.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &texts); err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Variants map[string]struct {
			Texts []struct {
				Name string
				IDs  []int
			}
		}
	}
	if err := json.Unmarshal(tokenizeGunzip(t, filepath.Join(data, "golden.json.gz")), &golden); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{}
	for _, c := range golden.Variants["qwen3"].Texts {
		want[c.Name] = c.IDs
	}
	for _, c := range texts.Texts {
		if c.Name != "specials" && c.Name != "empty" && c.Name != "emoji_zwj" {
			continue
		}
		var out bytes.Buffer
		if err := runTokenize([]string{"--tokenizer", path}, strings.NewReader(c.Text), &out); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		var got struct {
			IDs []int `json:"ids"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%s: output %q: %v", c.Name, out.String(), err)
		}
		if got.IDs == nil || !slices.Equal(got.IDs, want[c.Name]) {
			t.Errorf("%s: ids %v (output %q), want %v", c.Name, got.IDs, out.String(), want[c.Name])
		}
	}

	bad := []struct {
		args  []string
		stdin string
		says  string
	}{
		{nil, "hi", "--tokenizer is required"},
		{[]string{"--tokenizer", path, "extra"}, "hi", `unexpected argument "extra"`},
		{[]string{"--tokenizer", path}, "hi \xff", "not valid UTF-8"},
		{[]string{"--tokenizer", filepath.Join(t.TempDir(), "none.json")}, "hi", "no such file"},
	}
	for _, c := range bad {
		err := runTokenize(c.args, strings.NewReader(c.stdin), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("tokenize %q: error %v, want one saying %q", c.args, err, c.says)
		}
	}
}

func tokenizeGunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
