package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"petal/internal/service"
)

// echoReply answers every prompt with a reply that names its last user
// message, so each client can check that it got its own complete answer.
func echoReply(prompt string) string {
	return "Thinking about " + lastUser(prompt) + ".</think>\n\nAnswer to " + lastUser(prompt) + ": " + strings.Repeat("la ", 20)
}

// TestManyClients runs concurrent streaming clients, a third of which hang
// up mid-stream. Every stream that finishes must be complete and correct,
// and nothing may be left behind: sequences, queue places, and goroutines
// (which TestMain's leak check finds).
func TestManyClients(t *testing.T) {
	const clients = 24
	ts := newTestServer(t, service.Options{QueueLimit: clients}, Options{}, echoReply)
	ts.model.SetStepDelay(200 * time.Microsecond)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- runClient(ts.URL, i, i%3 == 0)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// A client that hung up last is noticed at the server's next token.
	m := waitQueue(t, ts.svc, func(m service.Metrics) bool { return m.Running+m.Waiting == 0 })
	if m.Completed < clients*2/3 || m.Completed+m.Failed != clients || m.Waiting != 0 || m.Running != 0 {
		t.Errorf("metrics after all clients: %+v", m)
	}
	if live := ts.model.Live(); live != int64(m.CacheEntries) {
		t.Errorf("%d sequences alive, %d in the cache", live, m.CacheEntries)
	}
}

// runClient streams one chat; with hangUp it leaves after a few events.
func runClient(url string, i int, hangUp bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := fmt.Sprintf("client %d", i)
	body := fmt.Sprintf(`{"stream":true,"messages":[{"role":"user","content":%q}]}`, name)
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: status %d", name, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	var content, reasoning, finish string
	events, done := 0, false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if events++; hangUp && events == 4 {
			return nil // the deferred cancel hangs up
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content          string
					ReasoningContent string `json:"reasoning_content"`
				}
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return fmt.Errorf("%s: %q: %v", name, line, err)
		}
		content += c.Choices[0].Delta.Content
		reasoning += c.Choices[0].Delta.ReasoningContent
		if c.Choices[0].FinishReason != nil {
			finish = *c.Choices[0].FinishReason
		}
	}
	wantContent := "Answer to " + name + ": " + strings.TrimSpace(strings.Repeat("la ", 20))
	if !done || content != wantContent || reasoning != "Thinking about "+name+"." || finish != "stop" {
		return fmt.Errorf("%s: done %v, content %q, reasoning %q, finish %q", name, done, content, reasoning, finish)
	}
	return nil
}

// TestClientsTakeTurns queues several requests of one application (by
// User-Agent) and then one of another: the other's goes next.
func TestClientsTakeTurns(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("</think>\n\n"+strings.Repeat("z", 40)))
	ts.model.SetStepDelay(time.Millisecond)
	finished := make(chan string, 5)
	send := func(agent string, waiting int) {
		req := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`)
		req.Header.Set("User-Agent", agent)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			finished <- agent
		}()
		waitQueue(t, ts.svc, func(m service.Metrics) bool { return m.Running == 1 && m.Waiting == waiting })
	}
	send("agent", 0)
	for i := range 3 {
		send("agent", i+1)
	}
	send("chat-window", 4)
	var order []string
	for range 5 {
		order = append(order, <-finished)
	}
	if order[0] != "agent" || order[1] != "chat-window" {
		t.Errorf("finished in order %v: the chat window should follow the running request", order)
	}
}
