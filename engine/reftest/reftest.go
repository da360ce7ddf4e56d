// Package reftest reads the reference fixtures that tools/refgen writes
// with transformers (engine/testdata/fixtures): for each tiny checkpoint,
// teacher-forced logits at every position and greedy continuations; and
// the vision fixtures that tools/visref writes (LoadVision). Every
// backend's tests compare against them.
package reftest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
)

// Reference is one fixture's reference.json plus its logits.
type Reference struct {
	Dir    string
	Tokens []int `json:"tokens"`
	Vocab  int   `json:"vocab_size"`
	Greedy []struct {
		Prompt   []int `json:"prompt"`
		Tokens   []int `json:"tokens"`
		FirstEOS *int  `json:"first_eos_index"`
	} `json:"greedy"`
	LogitsFile string `json:"logits"`
	// Logits are row-major [len(Tokens)][Vocab].
	Logits []float32 `json:"-"`
}

// Dir is the folder holding the fixtures.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "fixtures")
}

// All loads every fixture.
func All() ([]*Reference, error) {
	paths, err := filepath.Glob(filepath.Join(Dir(), "*", "reference.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("reftest: no fixtures under %s", Dir())
	}
	var refs []*Reference
	for _, p := range paths {
		r, err := Load(filepath.Dir(p))
		if err != nil {
			return nil, err
		}
		refs = append(refs, r)
	}
	return refs, nil
}

// Load reads the fixture in dir.
func Load(dir string) (*Reference, error) {
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		return nil, err
	}
	r := &Reference{Dir: dir}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("reftest: %s: %w", dir, err)
	}
	if r.Logits, err = readF32(filepath.Join(dir, r.LogitsFile)); err != nil {
		return nil, err
	}
	if len(r.Logits) != len(r.Tokens)*r.Vocab {
		return nil, fmt.Errorf("reftest: %s: %d logits for %d tokens x %d", dir, len(r.Logits), len(r.Tokens), r.Vocab)
	}
	return r, nil
}

// readF32 reads a file of little-endian float32s.
func readF32(path string) ([]float32, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(raw)%4 != 0 {
		return nil, fmt.Errorf("reftest: %s: %d bytes, not whole float32s", path, len(raw))
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

// Name is the fixture's folder name.
func (r *Reference) Name() string { return filepath.Base(r.Dir) }

// Row is the reference logits at position pos.
func (r *Reference) Row(pos int) []float32 { return r.Logits[pos*r.Vocab : (pos+1)*r.Vocab] }
