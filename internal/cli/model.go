package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
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
// print, once. The usage is the command's summary and its flags, less
// those hiddenFlags names.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("petal "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: petal %s [flags]\n\n", name)
		if c, ok := commands[name]; ok {
			fmt.Fprintf(stderr, "%s\n\n", c.summary)
		}
		fmt.Fprintln(stderr, "flags:")
		shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		fs.VisitAll(func(f *flag.Flag) {
			if !slices.Contains(hiddenFlags[name], f.Name) {
				shown.Var(f.Value, f.Name, f.Usage)
				shown.Lookup(f.Name).DefValue = f.DefValue
			}
		})
		shown.SetOutput(stderr)
		shown.PrintDefaults()
	}
	return fs
}

// hiddenFlags are flags, by command, that the usage leaves out: bench's
// --arm is how its parent process starts each arm's process, not a flag
// for people.
var hiddenFlags = map[string][]string{"bench": {"arm"}}

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
