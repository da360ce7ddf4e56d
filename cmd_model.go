package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"petal/engine"
	"petal/engine/cpu"
)

// backends maps --backend values to loaders.
var backends = map[string]func(dir string) (engine.Model, error){
	"cpu": func(dir string) (engine.Model, error) { return cpu.Open(dir) },
}

func openModel(dir, backend string) (engine.Model, error) {
	if dir == "" {
		return nil, errors.New("--model DIR is required")
	}
	open, ok := backends[backend]
	if !ok {
		names := make([]string, 0, len(backends))
		for n := range backends {
			names = append(names, n)
		}
		return nil, fmt.Errorf("unknown backend %q (have %s)", backend, strings.Join(names, ", "))
	}
	return open(dir)
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

// newFlags makes a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("petal "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// noArgs rejects stray positional arguments after the flags.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
