package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRender runs `petal render` on a golden case of engine/chattemplate
// and expects transformers' prompt byte for byte, with no added newline.
func TestRender(t *testing.T) {
	const data = "../../engine/chattemplate/testdata"
	tmpl, err := os.ReadFile(filepath.Join(data, "templates", "qwen3.5.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Messages json.RawMessage `json:"messages"`
		Tools    json.RawMessage `json:"tools"`
	}
	raw, err := os.ReadFile(filepath.Join(data, "cases", "tools-and-results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Results map[string]struct {
			Output string `json:"output"`
		} `json:"results"`
	}
	raw, err = os.ReadFile(filepath.Join(data, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, body := range map[string][]byte{"chat_template.jinja": tmpl, "messages.json": c.Messages, "tools.json": c.Tools} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(extra ...string) (string, error) {
		var out bytes.Buffer
		args := append([]string{"render", "--model", dir, "--messages", filepath.Join(dir, "messages.json"), "--tools", filepath.Join(dir, "tools.json")}, extra...)
		err := Run(args, &out)
		return out.String(), err
	}

	got, err := run()
	if err != nil {
		t.Fatal(err)
	}
	if want := golden.Results["tools-and-results/qwen3.5"].Output; want == "" || got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}

	off, err := run("--template-kwargs", `{"enable_thinking": false}`)
	if err != nil || !strings.HasSuffix(off, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Fatalf("enable_thinking=false: %q, %v", off, err)
	}
	noGen, err := run("--no-generation-prompt")
	if err != nil || noGen != strings.TrimSuffix(got, "<|im_start|>assistant\n<think>\n") {
		t.Fatalf("--no-generation-prompt: %q, %v", noGen, err)
	}
	if _, err := run("--template-kwargs", `[1]`); err == nil {
		t.Fatal("kwargs that are not an object were accepted")
	}
	if err := Run([]string{"render", "--model", dir}, &bytes.Buffer{}); err == nil {
		t.Fatal("missing --messages was accepted")
	}
}
