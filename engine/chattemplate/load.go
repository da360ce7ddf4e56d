package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// The files of a checkpoint folder that hold the template.
const (
	TemplateFile        = "chat_template.jinja"
	TokenizerConfigFile = "tokenizer_config.json"
)

// specialTokens are the tokenizer_config.json entries transformers passes
// to the template as variables.
var specialTokens = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// Load reads the chat template of a checkpoint folder: chat_template.jinja
// if present, else the chat_template of tokenizer_config.json (a string, or
// a list of named templates of which "default" is taken).
func Load(dir string) (*Template, error) {
	var cfg map[string]json.RawMessage
	raw, err := readLimited(filepath.Join(dir, TokenizerConfigFile), MaxConfigBytes, ErrBadTemplate)
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadTemplate, TokenizerConfigFile, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}

	var source string
	src, err := readLimited(filepath.Join(dir, TemplateFile), MaxTemplateBytes, ErrBadTemplate)
	switch {
	case err == nil:
		source = string(src)
	case errors.Is(err, fs.ErrNotExist):
		if source, err = configTemplate(cfg["chat_template"]); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}

	t, err := Parse(source)
	if err != nil {
		return nil, err
	}
	for _, name := range specialTokens {
		if tok, ok := tokenText(cfg[name]); ok {
			t.vars[name] = tok
		}
	}
	return t, nil
}

func configTemplate(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", ErrNoTemplate
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("%w: chat_template is neither a string nor a list of named templates", ErrBadTemplate)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("%w: no template named \"default\" in chat_template", ErrNoTemplate)
}

// tokenText reads a special token, written as a string or as an added-token
// object with "content".
func tokenText(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != nil {
		return *obj.Content, true
	}
	return "", false
}

// readLimited reads a file of at most limit bytes; a larger one is an error
// of the given class.
func readLimited(path string, limit int64, class error) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", class, filepath.Base(path), limit)
	}
	return b, nil
}
