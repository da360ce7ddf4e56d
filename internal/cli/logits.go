package cli

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"

	"petal/engine"
)

func init() {
	commands["logits"] = command{
		summary: "write the logits of every position as little-endian float32 [tokens][vocab]",
		run:     runLogits,
	}
}

func runLogits(args []string, stdout io.Writer) error {
	fs := newFlags("logits", os.Stderr)
	dir, backend := modelFlags(fs, "checkpoint folder")
	tokens := fs.String("tokens", "", "comma-separated token ids")
	outPath := fs.String("out", "", "output file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ids, err := parseTokens(*tokens)
	if err != nil {
		return err
	}
	if *outPath == "" {
		return errors.New("--out FILE is required")
	}
	return onSequence(*dir, *backend, func(m engine.Model, seq engine.Sequence) error {
		logits := make([]float32, len(ids)*m.Config().Vocab)
		if err := seq.Forward(ids, logits); err != nil {
			return err
		}
		return writeFloats(*outPath, logits)
	})
}

// writeFloats writes v as little-endian float32 through a temporary file,
// so a failed run never leaves a partial output behind.
func writeFloats(path string, v []float32) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var b [4]byte
	for _, x := range v {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(x))
		w.Write(b[:])
	}
	if err := w.Flush(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
