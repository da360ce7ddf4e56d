package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"petal/engine/chattemplate"
	"petal/engine/reply"
	"petal/internal/runtime"
	"petal/internal/service"
)

// stdin is where petal chat reads the user's lines; tests replace it.
var stdin io.Reader = os.Stdin

// MaxChatLine bounds one line typed into petal chat.
const MaxChatLine = 1 << 20

func init() {
	commands["chat"] = command{
		summary: "chat with the model in the terminal, thinking shown apart from the answer",
		run:     runChat,
	}
}

func runChat(args []string, stdout io.Writer) error {
	fs := newFlags("chat", os.Stderr)
	dir, backend := modelFlags(fs, "checkpoint folder (default: the installed model, else the built-in demo)")
	maxTokens := fs.Int("max-tokens", 0, "tokens per reply at most (default: up to the end of the context)")
	noThink := fs.Bool("no-think", false, "answer without thinking first")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *maxTokens < 0 {
		return fmt.Errorf("--max-tokens must be at least 0")
	}
	var err error
	if *dir, err = resolveModel(*dir, stdout); err != nil {
		return err
	}
	// One user asks one thing at a time: the memory more requests would
	// hold goes to the prefix cache.
	l, err := runtime.Load(runtime.LoadRequest{Dir: *dir, Backend: *backend, CacheBytes: service.DefaultCacheBytes, Parallel: 1}, stdout)
	if err != nil {
		return err
	}
	defer l.Model.Close()
	svc, err := service.New(l.Model, *dir, service.Options{ContextLength: l.Context, CacheBytes: l.CacheBytes, Parallel: l.Parallel})
	if err != nil {
		return err
	}
	defer svc.Close()
	// Ctrl-C stops a reply; at the prompt it leaves, as end of input does.
	sigs := make(chan os.Signal, 1)
	notifyInterrupt(sigs)
	defer signal.Stop(sigs)
	c := &chat{svc: svc, out: stdout, maxTokens: *maxTokens, interrupts: sigs, echo: !isTerminal(stdin)}
	if *noThink {
		c.kwargs = map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}
	}
	return c.loop(context.Background(), stdin)
}

// notifyInterrupt relays Ctrl-C to c; tests replace it to send their own.
var notifyInterrupt = func(c chan<- os.Signal) { signal.Notify(c, os.Interrupt) }

// isTerminal reports whether r is a terminal, which echoes what is typed.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// chat is one terminal conversation.
type chat struct {
	svc       *service.Service
	out       io.Writer
	maxTokens int
	kwargs    map[string]json.RawMessage
	history   []chattemplate.Message
	// interrupts stop the reply being generated, or leave at the prompt.
	interrupts <-chan os.Signal
	// echo repeats each line read after the prompt, for input that is not
	// a terminal (a pipe), where the reply would follow the prompt on its
	// line.
	echo bool
}

// chatHelp lists the commands of petal chat.
const chatHelp = "/help shows this, /reset starts a new conversation, /exit (or end of input) leaves; Ctrl-C stops a reply"

// loop reads a line per user turn until EOF, "/exit" or an interrupt at
// the prompt. A line that is one word starting with "/" is a command, never
// sent to the model.
func (c *chat) loop(ctx context.Context, in io.Reader) error {
	info := c.svc.Info()
	fmt.Fprintf(c.out, "chatting with %s (context %d tokens); %s\n", info.Name, info.ContextLength, chatHelp)
	stop := make(chan struct{})
	defer close(stop)
	lines, readErr := readLines(in, stop)
	for {
		fmt.Fprint(c.out, "> ")
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				fmt.Fprintln(c.out)
				return <-readErr
			}
			line = strings.TrimSpace(l)
		case <-c.interrupts:
			fmt.Fprintln(c.out)
			return nil
		}
		if c.echo {
			fmt.Fprintln(c.out, line)
		}
		switch {
		case line == "":
			continue
		case line == "/exit":
			return nil
		case line == "/reset":
			c.history = nil
			fmt.Fprintln(c.out, "(new conversation)")
			continue
		case line == "/help":
			fmt.Fprintln(c.out, chatHelp)
			continue
		case strings.HasPrefix(line, "/") && !strings.ContainsAny(line, " \t"):
			fmt.Fprintf(c.out, "unknown command %s; %s\n", line, chatHelp)
			continue
		}
		if err := c.interruptible(ctx, line); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(c.out, "\nerror: %v\n", err)
		}
	}
}

// interruptible runs one turn that an interrupt stops; a stopped reply is
// not kept in the conversation.
func (c *chat) interruptible(ctx context.Context, line string) error {
	turnCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-c.interrupts:
			cancel()
		case <-done:
		}
	}()
	err := c.turn(turnCtx, line)
	close(done)
	<-watched // the next prompt's interrupt is not this turn's
	if err != nil && turnCtx.Err() != nil && ctx.Err() == nil {
		fmt.Fprintln(c.out, "(stopped; the reply is not kept)")
		return nil
	}
	return err
}

// readLines sends in's lines until its end or stop; the error channel then
// holds the read's error (nil at end of input).
func readLines(in io.Reader, stop <-chan struct{}) (<-chan string, <-chan error) {
	lines, errc := make(chan string), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(nil, MaxChatLine)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stop:
				return
			}
		}
		errc <- sc.Err()
		close(lines)
	}()
	return lines, errc
}

// turn sends one user message and prints the reply as it comes: thinking
// between [thinking] markers, then the answer, then any tool calls.
func (c *chat) turn(ctx context.Context, text string) error {
	msgs := append(c.history, chattemplate.Message{Role: "user", Content: chattemplate.TextContent(text)})
	req := &service.Request{Messages: msgs, MaxTokens: c.maxTokens, Kwargs: c.kwargs}
	var res reply.Result
	thinking := false
	sum, err := c.svc.Generate(ctx, req, func(e reply.Event) error {
		res.Add(e)
		switch e.Kind {
		case reply.KindReasoning:
			if !thinking {
				fmt.Fprint(c.out, "[thinking]\n")
				thinking = true
			}
			fmt.Fprint(c.out, e.Text)
			return nil
		case reply.KindToolEnd:
			call := res.ToolCalls[len(res.ToolCalls)-1]
			c.endThinking(&thinking)
			fmt.Fprintf(c.out, "\n[tool call] %s %s\n", call.Name, call.Arguments)
			return nil
		case reply.KindContent:
			c.endThinking(&thinking)
			fmt.Fprint(c.out, e.Text)
		}
		return nil
	})
	c.endThinking(&thinking)
	fmt.Fprintln(c.out)
	if err != nil {
		return err
	}
	if sum.Finish == service.FinishLength {
		fmt.Fprintln(c.out, "(reply cut at the token limit)")
	}
	answer := chattemplate.Message{Role: "assistant", Content: chattemplate.TextContent(res.Content)}
	if res.Reasoning != "" {
		answer.ReasoningContent = &res.Reasoning
	}
	c.history = append(msgs, answer)
	return nil
}

func (c *chat) endThinking(thinking *bool) {
	if *thinking {
		fmt.Fprint(c.out, "\n[/thinking]\n")
		*thinking = false
	}
}
