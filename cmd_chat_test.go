package main

import (
	"bytes"
	"strings"
	"testing"

	"petal/engine"
	"petal/internal/service/servicetest"
)

// scriptedFolder writes a checkpoint folder without weights and registers
// a backend that serves it with a scripted model answering reply(prompt).
func scriptedFolder(t *testing.T, reply func(prompt string) string) string {
	t.Helper()
	dir, tok := servicetest.Folder(t)
	backends["scripted"] = func(string) (engine.Model, error) {
		return servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, reply)), nil
	}
	t.Cleanup(func() { delete(backends, "scripted") })
	return dir
}

func TestChatCommand(t *testing.T) {
	turns := 0
	dir := scriptedFolder(t, func(prompt string) string {
		turns++
		if strings.Contains(prompt, "Hello there!") { // the first answer is in the history
			return "Again?</think>\n\nStill here."
		}
		return "Let me think.</think>\n\nHello there!"
	})
	stdin = strings.NewReader("hi\n\nhow are you\n/reset\nhi\n")
	defer func() { stdin = nil }()
	var out bytes.Buffer
	if err := dispatch([]string{"chat", "--model", dir, "--backend", "scripted"}, &out); err != nil {
		t.Fatal(err)
	}
	first := "> [thinking]\nLet me think.\n[/thinking]\nHello there!\n"
	// The blank line only prompts again.
	want := first + "> > [thinking]\nAgain?\n[/thinking]\nStill here.\n> (new conversation)\n" + first + "> \n"
	got := out.String()
	if i := strings.Index(got, "\n"); i < 0 || !strings.HasPrefix(got, "chatting with ") || got[i+1:] != want {
		t.Errorf("output:\n%s\nwant after the banner:\n%s", got, want)
	}
	if turns != 3 {
		t.Errorf("%d model turns, want 3", turns)
	}
}

func TestChatCommandNoThink(t *testing.T) {
	var prompt string
	dir := scriptedFolder(t, func(p string) string { prompt = p; return "Direct." })
	stdin = strings.NewReader("hi\n/exit\nnever read\n")
	defer func() { stdin = nil }()
	var out bytes.Buffer
	if err := dispatch([]string{"chat", "--model", dir, "--backend", "scripted", "--no-think", "--max-tokens", "3"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(prompt, "<think>\n\n</think>\n\n") {
		t.Errorf("prompt %q does not switch thinking off", prompt)
	}
	if !strings.Contains(out.String(), "> Dir\n(reply cut at the token limit)\n> ") || strings.Contains(out.String(), "never") {
		t.Errorf("output %q", out.String())
	}
}
