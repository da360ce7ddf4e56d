package prefixdisk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad: whatever a file under a snapshot's name holds, Load never
// panics, loads the file only when it is byte for byte what a writer makes
// of the tokens and the payload loaded, and deletes it otherwise.
func FuzzLoad(f *testing.F) {
	tokens := seq(3)
	valid, err := os.ReadFile(save(f, f.TempDir(), modelA, tokens))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(valid[:headerBytes])
	f.Add([]byte{})
	f.Add([]byte(magic))
	// A payload length that wraps the expected size round to a file
	// shorter than its header and tokens.
	wrapped := bytes.Clone(valid[:headerBytes+8])
	binary.LittleEndian.PutUint64(wrapped[56:], math.MaxUint64-3)
	f.Add(wrapped)
	for _, at := range []int{8, 12, 16, 48, 52, 56, headerBytes} {
		b := bytes.Clone(valid)
		b[at] ^= 1
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, fileName(modelA, tokens))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, _ := open(t, dir, 1<<30)
		var closed bool
		v, n := Load(s, modelA, tokens, 0, loadAll(&closed))
		if n == 0 {
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a file not loaded was kept: %v", err)
			}
			return
		}
		if n != len(tokens) || closed {
			t.Fatalf("loaded %d tokens, closed %v", n, closed)
		}
		if want := written(modelA, tokens, v.data); !bytes.Equal(data, want) {
			t.Errorf("loaded a file of %d bytes that no writer makes:\n% x\nwant\n% x", len(data), data[:min(len(data), 96)], want[:min(len(want), 96)])
		}
	})
}

// written lays a snapshot out by hand, as the format says: the file a
// writer makes of model's state after tokens.
func written(model ModelID, tokens []int, payload []byte) []byte {
	le := binary.LittleEndian
	body := make([]byte, 0, 4*len(tokens)+len(payload))
	for _, t := range tokens {
		body = le.AppendUint32(body, uint32(t))
	}
	body = append(body, payload...)
	out := []byte(magic)
	out = le.AppendUint32(out, FormatVersion)
	out = le.AppendUint32(out, 0)
	out = append(out, model[:]...)
	out = le.AppendUint32(out, uint32(len(tokens)))
	out = le.AppendUint32(out, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	out = le.AppendUint64(out, uint64(len(payload)))
	return append(out, body...)
}
