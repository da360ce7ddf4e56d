package main

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
	dir := fs.String("model", "", "checkpoint folder (default: the installed model, else the built-in demo)")
	backend := fs.String("backend", "cpu", "backend")
	maxTokens := fs.Int("max-tokens", 0, "tokens per reply at most (default: up to the end of the context)")
	noThink := fs.Bool("no-think", false, "answer without thinking first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *maxTokens < 0 {
		return fmt.Errorf("--max-tokens must be at least 0")
	}
	var err error
	if *dir, err = resolveModel(*dir, stdout); err != nil {
		return err
	}
	l, err := loadModel(loadRequest{Dir: *dir, Backend: *backend, CacheBytes: service.DefaultCacheBytes}, stdout)
	if err != nil {
		return err
	}
	defer l.model.Close()
	svc, err := service.New(l.model, *dir, service.Options{ContextLength: l.context, CacheBytes: l.cacheBytes})
	if err != nil {
		return err
	}
	defer svc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c := &chat{svc: svc, out: stdout, maxTokens: *maxTokens}
	if *noThink {
		c.kwargs = map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}
	}
	return c.loop(ctx, stdin)
}

// chat is one terminal conversation.
type chat struct {
	svc       *service.Service
	out       io.Writer
	maxTokens int
	kwargs    map[string]json.RawMessage
	history   []chattemplate.Message
}

// loop reads a line per user turn until EOF or "/exit"; "/reset" starts a
// new conversation.
func (c *chat) loop(ctx context.Context, in io.Reader) error {
	info := c.svc.Info()
	fmt.Fprintf(c.out, "chatting with %s (context %d tokens); /reset starts over, /exit or end of input leaves\n", info.Name, info.ContextLength)
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, MaxChatLine)
	for {
		fmt.Fprint(c.out, "> ")
		if !sc.Scan() {
			fmt.Fprintln(c.out)
			return sc.Err()
		}
		line := strings.TrimSpace(sc.Text())
		switch line {
		case "":
			continue
		case "/exit":
			return nil
		case "/reset":
			c.history = nil
			fmt.Fprintln(c.out, "(new conversation)")
			continue
		}
		if err := c.turn(ctx, line); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(c.out, "\nerror: %v\n", err)
		}
	}
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
