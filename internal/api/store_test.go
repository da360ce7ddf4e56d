package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestResponsesStore continues conversations as the AI SDK's default
// OpenAI provider and the openai SDK do: by previous_response_id, and by
// item_reference to the last turn's items, streamed or not; a response
// sent with store false is not kept, and an unknown id is a 400 naming it.
func TestResponsesStore(t *testing.T) {
	var seen prompts
	ts := newTestServer(t, service.Options{CacheBytes: -1}, Options{}, seen.record(func(p string) string {
		return fmt.Sprintf("</think>\n\nAnswer %d.", strings.Count(p, "<|im_start|>user"))
	}))
	send := func(body string) (map[string]any, string) {
		t.Helper()
		r := bothResponses(t, ts, body)
		return r, seen.last()
	}
	r1, _ := send(`{"instructions":"Be brief.","input":"My name is Ada."}`)
	if r1["store"] != true {
		t.Errorf("store is %v, want true by default", r1["store"])
	}
	msg := r1["output"].([]any)[0].(map[string]any)
	r2, p := send(`{"instructions":"Be brief.","previous_response_id":"` + r1["id"].(string) + `","input":"What is my name?"}`)
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nMy name is Ada.<|im_end|>\n<|im_start|>assistant\nAnswer 1.<|im_end|>\n<|im_start|>user\nWhat is my name?<|im_end|>"
	if !strings.Contains(p, want) || r2["previous_response_id"] != r1["id"] {
		t.Errorf("previous_response_id: the prompt lacks the first turn:\n%s", p)
	}
	// Three turns deep, through the second.
	_, p = send(`{"previous_response_id":"` + r2["id"].(string) + `","input":[{"role":"user","content":"And again?"}]}`)
	if !strings.Contains(p, "My name is Ada.<|im_end|>\n<|im_start|>assistant\nAnswer 1.<|im_end|>\n<|im_start|>user\nWhat is my name?<|im_end|>\n<|im_start|>assistant\nAnswer 2.<|im_end|>\n<|im_start|>user\nAnd again?") {
		t.Errorf("a chain of two: %s", p)
	}

	// The AI SDK sends the history with its assistant items as references.
	_, p = send(`{"input":[{"role":"user","content":[{"type":"input_text","text":"My name is Ada."}]},{"type":"item_reference","id":"` + msg["id"].(string) + `"},{"role":"user","content":[{"type":"input_text","text":"Who am I?"}]}]}`)
	if !strings.Contains(p, "My name is Ada.<|im_end|>\n<|im_start|>assistant\nAnswer 1.<|im_end|>\n<|im_start|>user\nWho am I?") {
		t.Errorf("item_reference: %s", p)
	}

	off, _ := send(`{"store":false,"input":"Forget this."}`)
	if off["store"] != false {
		t.Errorf("store is %v, want false", off["store"])
	}
	for _, c := range []struct{ body, want string }{
		{`{"previous_response_id":"` + off["id"].(string) + `","input":"hi"}`, off["id"].(string)},
		{`{"previous_response_id":"resp_gone","input":"hi"}`, "resp_gone"},
		{`{"input":[{"type":"item_reference","id":"msg_gone"}]}`, "msg_gone"},
	} {
		resp, body := do(t, post(t, ts.URL+"/v1/responses", c.body))
		var e struct {
			Error struct {
				Message, Type string
				Param         *string
			}
		}
		json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != 400 || !strings.Contains(e.Error.Message, c.want) || e.Error.Type != "invalid_request_error" || e.Error.Param == nil {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, body)
		}
	}
}

// TestResponseStoreBounds: past MaxStoredResponses or MaxStoredBytes the
// least recently used response goes, with the items it stored; one used
// again stays.
func TestResponseStoreBounds(t *testing.T) {
	s := newResponseStore()
	item := func(id string, size int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"id":%q,"text":%q}`, id, strings.Repeat("x", size)))
	}
	for i := range MaxStoredResponses {
		it := item(fmt.Sprintf("msg_%d", i), 10)
		s.put(fmt.Sprintf("resp_%d", i), []json.RawMessage{it}, []json.RawMessage{it})
	}
	s.conversation("resp_0") // used again: resp_1 is now the oldest
	it := item("msg_new", 10)
	s.put("resp_new", []json.RawMessage{it}, []json.RawMessage{it})
	if _, ok := s.conversation("resp_1"); ok {
		t.Error("resp_1 outlived the bound")
	}
	if _, ok := s.item("msg_1"); ok {
		t.Error("msg_1 outlived its response")
	}
	for _, id := range []string{"resp_0", "resp_2", "resp_new"} {
		if _, ok := s.conversation(id); !ok {
			t.Errorf("%s was evicted", id)
		}
	}
	big := item("msg_big", MaxStoredBytes/2)
	s.put("resp_big1", []json.RawMessage{big}, nil)
	s.put("resp_big2", []json.RawMessage{big}, nil)
	if _, ok := s.conversation("resp_big1"); ok || s.bytes > MaxStoredBytes {
		t.Errorf("the byte bound was not kept: %d bytes held", s.bytes)
	}
	if _, ok := s.conversation("resp_big2"); !ok {
		t.Error("the newest response was evicted")
	}
}

// TestItemReferencesBounded: references to one stored item of 1 MiB may
// bring in up to a body's worth of items, and past that the request is a
// 400 at once, not parsed into a copy of the item per reference.
func TestItemReferencesBounded(t *testing.T) {
	ts := newTestServer(t, service.Options{CacheBytes: -1}, Options{}, func(string) string { return "</think>\n\nOK." })
	const size = 1 << 20
	big := `{"type":"message","role":"user","id":"msg_big","content":[{"type":"input_text","text":"hi","pad":"` + strings.Repeat("p", size) + `"}]}`
	if resp, body := do(t, post(t, ts.URL+"/v1/responses", `{"input":[`+big+`]}`)); resp.StatusCode != 200 {
		t.Fatalf("storing the item: %d %s", resp.StatusCode, body)
	}
	refs := func(n int) string {
		return `{"input":[` + strings.TrimSuffix(strings.Repeat(`{"type":"item_reference","id":"msg_big"},`, n), ",") + `]}`
	}
	fit := MaxReferencedBytes / (size + 100)
	if resp, body := do(t, post(t, ts.URL+"/v1/responses", refs(fit))); resp.StatusCode != 200 {
		t.Errorf("%d references, within the bound: %d %s", fit, resp.StatusCode, body)
	}
	resp, body := do(t, post(t, ts.URL+"/v1/responses", refs(fit+2)))
	if resp.StatusCode != 400 || !strings.Contains(body, "the items that input refers to hold more than 16 MiB") {
		t.Errorf("%d references, past the bound: %d %s", fit+2, resp.StatusCode, body)
	}
}
