package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goldenCase is one file of testdata/cases, as tools/tmplgen/gen_golden.py
// reads it.
type goldenCase struct {
	Comment             string                     `json:"comment"`
	Templates           []string                   `json:"templates"`
	Messages            []Message                  `json:"messages"`
	Tools               *[]Tool                    `json:"tools"`
	AddGenerationPrompt bool                       `json:"add_generation_prompt"`
	Kwargs              map[string]json.RawMessage `json:"kwargs"`
}

// goldenResult is what transformers gave for one (case, template) pair.
type goldenResult struct {
	Output     *string `json:"output"`
	ErrorClass string  `json:"error_class"`
	Error      string  `json:"error"`
}

func loadTemplate(t testing.TB, name string) *Template {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "templates", name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tp, err := Parse(string(src))
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	// The special tokens gen_golden.py gives transformers' tokenizer.
	tp.vars["eos_token"] = "<|im_end|>"
	tp.vars["pad_token"] = "<|endoftext|>"
	return tp
}

// TestGolden renders every case with every template it names and compares
// with testdata/golden.json, written by transformers' apply_chat_template
// (tools/tmplgen/gen_golden.py on the accelerator machine): byte-identical
// prompts, and the same class of error where Python raised.
func TestGolden(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Generator string                  `json:"generator"`
		Results   map[string]goldenResult `json:"results"`
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "cases", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	templates := map[string]*Template{}
	seen := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var c goldenCase
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		for _, tn := range c.Templates {
			key := name + "/" + tn
			t.Run(key, func(t *testing.T) {
				want, ok := golden.Results[key]
				if !ok {
					t.Fatalf("no golden result; rerun tools/tmplgen/gen_golden.py")
				}
				seen++
				if templates[tn] == nil {
					templates[tn] = loadTemplate(t, tn)
				}
				in := Input{Messages: c.Messages, AddGenerationPrompt: c.AddGenerationPrompt, Kwargs: c.Kwargs}
				if c.Tools != nil {
					in.Tools = *c.Tools
				}
				got, err := templates[tn].Render(t.Context(), in)
				checkGolden(t, want, got, err)
			})
		}
	}
	if seen != len(golden.Results) {
		t.Errorf("%d golden results, %d cases rendered: cases and golden.json disagree", len(golden.Results), seen)
	}
}

func checkGolden(t *testing.T, want goldenResult, got string, err error) {
	t.Helper()
	if want.Output != nil {
		if err != nil {
			t.Fatalf("render failed: %v\nwant:\n%s", err, *want.Output)
		}
		if got != *want.Output {
			t.Fatalf("prompt differs\n got: %q\nwant: %q", got, *want.Output)
		}
		return
	}
	if err == nil {
		t.Fatalf("rendered %q, want %s: %s", got, want.ErrorClass, want.Error)
	}
	var raised *RaiseError
	switch want.ErrorClass {
	case "TemplateError":
		if !errors.As(err, &raised) || raised.Message != want.Error {
			t.Fatalf("got %v, want the template to raise %q", err, want.Error)
		}
	case "ValueError":
		if !errors.Is(err, ErrBadInput) {
			t.Fatalf("got %v, want bad input (%s)", err, want.Error)
		}
	default:
		if errors.As(err, &raised) || !errors.Is(err, ErrRender) {
			t.Fatalf("got %v, want a render failure like Python's %s: %s", err, want.ErrorClass, want.Error)
		}
	}
}
