package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"petal/engine"
	"petal/engine/backend"
	"petal/internal/runtime"
)

// onSequence opens dir's model on backend and hands f the model and a
// fresh sequence of it, closing both when f returns.
func onSequence(dir, backend string, f func(m engine.Model, seq engine.Sequence) error) error {
	m, err := runtime.OpenModel(dir, backend)
	if err != nil {
		return err
	}
	defer m.Close()
	seq, err := m.NewSequence()
	if err != nil {
		return fmt.Errorf("starting a sequence on %s: %w", dir, err)
	}
	defer seq.Close()
	return f(m, seq)
}

// parseTokens parses a comma-separated list of token ids.
func parseTokens(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--tokens needs at least one id, e.g. --tokens 1,2,3")
	}
	parts := strings.Split(s, ",")
	ids := make([]int, len(parts))
	for i, p := range parts {
		id, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("--tokens: %q is not an integer id", p)
		}
		ids[i] = id
	}
	return ids, nil
}

// newFlags makes a flag set that reports errors instead of exiting. It
// prints only the usage, on -h or a bad flag: the error itself is main's to
// print, once.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("petal "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage of petal %s:\n", name)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// modelFlags adds the --model and --backend flags of a command that opens
// a model; --backend's usage lists the backends there are.
func modelFlags(fs *flag.FlagSet, modelUsage string) (dir, backendName *string) {
	dir = fs.String("model", "", modelUsage)
	backendName = fs.String("backend", "cpu", "backend: "+strings.Join(backend.Names(), ", "))
	return dir, backendName
}

// parseFlags parses args into fs and rejects stray positional arguments
// after the flags.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
