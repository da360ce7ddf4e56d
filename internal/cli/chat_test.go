package cli

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"petal/engine"
	"petal/engine/backend"
	"petal/internal/service/servicetest"
)

// scriptedFolder writes a checkpoint folder without weights and registers
// a backend that serves it with a scripted model answering reply(prompt).
func scriptedFolder(t *testing.T, reply func(prompt string) string) string {
	t.Helper()
	dir, tok := servicetest.Folder(t)
	t.Cleanup(backend.Register("scripted", func(string) (engine.Model, error) {
		return servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, reply)), nil
	}))
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
	if err := Run([]string{"chat", "--model", dir, "--backend", "scripted"}, &out); err != nil {
		t.Fatal(err)
	}
	// Piped lines are echoed, so that each reply starts a line of its own.
	first := "> hi\n[thinking]\nLet me think.\n[/thinking]\nHello there!\n"
	// The blank line only prompts again.
	want := first + "> \n> how are you\n[thinking]\nAgain?\n[/thinking]\nStill here.\n> /reset\n(new conversation)\n" + first + "> \n"
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
	if err := Run([]string{"chat", "--model", dir, "--backend", "scripted", "--no-think", "--max-tokens", "3"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(prompt, "<think>\n\n</think>\n\n") {
		t.Errorf("prompt %q does not switch thinking off", prompt)
	}
	if !strings.Contains(out.String(), "> hi\nDir\n(reply cut at the token limit)\n> ") || strings.Contains(out.String(), "never") {
		t.Errorf("output %q", out.String())
	}
}

// Commands are never sent to the model, and Ctrl-C during a reply stops
// that reply, not the chat.
func TestChatCommandsAndInterrupt(t *testing.T) {
	var prompts []string
	sigs := make(chan chan<- os.Signal, 1)
	notify := notifyInterrupt
	notifyInterrupt = func(c chan<- os.Signal) { sigs <- c }
	defer func() { notifyInterrupt = notify }()
	dir, tok := servicetest.Folder(t)
	defer backend.Register("slow", func(string) (engine.Model, error) {
		m := servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, func(p string) string {
			prompts = append(prompts, lastUserLine(p))
			if len(prompts) == 1 {
				(<-sigs) <- os.Interrupt // Ctrl-C once the reply has begun
			}
			return "</think>\n\n" + strings.Repeat("word ", 200) + "END"
		}))
		m.SetStepDelay(time.Millisecond) // the whole reply takes far longer than the stop
		return m, nil
	})()
	stdin = strings.NewReader("tell me\n/help\n/nonsense\n/tmp/x is a path, not a command\n")
	defer func() { stdin = nil }()
	var out bytes.Buffer
	if err := Run([]string{"chat", "--model", dir, "--backend", "slow"}, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !slices.Equal(prompts, []string{"tell me", "/tmp/x is a path, not a command"}) {
		t.Errorf("the model was sent %q", prompts)
	}
	for _, want := range []string{"(stopped; the reply is not kept)\n> /help\n" + chatHelp + "\n", "unknown command /nonsense"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "END") != 1 || !strings.HasSuffix(got, "END\n> \n") { // the second reply only, whole
		t.Errorf("output:\n%s", got)
	}
}

// lastUserLine is the last user turn of a rendered prompt.
func lastUserLine(prompt string) string {
	i := strings.LastIndex(prompt, "<|im_start|>user\n")
	rest := prompt[i+len("<|im_start|>user\n"):]
	return rest[:strings.Index(rest, "<|im_end|>")]
}
