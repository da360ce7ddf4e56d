package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"petal/engine/tokenizer"
)

// maxTokenizeInput bounds the text `petal tokenize` reads from stdin.
const maxTokenizeInput = 64 << 20

func init() {
	commands["tokenize"] = command{
		summary: "print the token ids of UTF-8 text read from stdin as {\"ids\":[...]}",
		run: func(args []string, stdout io.Writer) error {
			return runTokenize(args, os.Stdin, stdout)
		},
	}
}

func runTokenize(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlags("tokenize", os.Stderr)
	path := fs.String("tokenizer", "", "tokenizer.json file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("tokenize: --tokenizer is required")
	}
	tok, err := tokenizer.Load(*path)
	if err != nil {
		return err
	}
	text, err := io.ReadAll(io.LimitReader(stdin, maxTokenizeInput+1))
	if err != nil {
		return fmt.Errorf("tokenize: reading stdin: %w", err)
	}
	if len(text) > maxTokenizeInput {
		return fmt.Errorf("tokenize: input larger than %d bytes", maxTokenizeInput)
	}
	if !utf8.Valid(text) {
		return errors.New("tokenize: input is not valid UTF-8")
	}
	return json.NewEncoder(stdout).Encode(struct {
		IDs []int `json:"ids"`
	}{tok.Encode(string(text))})
}
