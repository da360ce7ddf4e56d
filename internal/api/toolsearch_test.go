package api

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestToolSearch replays Claude Code's tool search: tools marked
// defer_loading are left out of the prompt (and of count_tokens) until a
// tool_reference in a tool_result loads them; a system message's
// tool_addition and tool_removal change the list too; a reference to a
// tool the request lacks is a 400 naming it.
func TestToolSearch(t *testing.T) {
	var seen prompts
	ts := newTestServer(t, service.Options{CacheBytes: -1}, Options{}, seen.record(func(p string) string {
		return "</think>\n\nok"
	}))
	prompt := func(body string) string {
		t.Helper()
		resp, text := do(t, post(t, ts.URL+"/v1/messages", body))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, text)
		}
		return seen.last()
	}
	count := func(body string) int {
		t.Helper()
		resp, text := do(t, post(t, ts.URL+"/v1/messages/count_tokens", body))
		var c struct {
			InputTokens int `json:"input_tokens"`
		}
		if resp.StatusCode != 200 || json.Unmarshal([]byte(text), &c) != nil {
			t.Fatalf("count_tokens: status %d: %s", resp.StatusCode, text)
		}
		return c.InputTokens
	}
	schema := `"input_schema":{"type":"object","properties":{"repo":{"type":"string","description":"` + strings.Repeat("owner/name of the repository ", 20) + `"}}}`
	tools := func(deferred bool) string {
		d := ""
		if deferred {
			d = `,"defer_loading":true`
		}
		return `"tools":[{"name":"Read","description":"Reads a file","input_schema":{"type":"object"}},
			{"name":"ToolSearch","description":"Loads deferred tools","input_schema":{"type":"object","properties":{"query":{"type":"string"}}}},
			{"name":"mcp__gh__create_issue","description":"Opens an issue",` + schema + d + `},
			{"name":"mcp__gh__merge_pr","description":"Merges a pull request",` + schema + d + `}]`
	}
	first := `"messages":[{"role":"user","content":"Open an issue"}]`
	p := prompt(`{"max_tokens":10,` + tools(true) + `,` + first + `}`)
	if !strings.Contains(p, "Reads a file") || strings.Contains(p, "mcp__gh__") {
		t.Errorf("the first prompt should offer Read and ToolSearch alone:\n%s", p)
	}
	if all, some := count(`{`+tools(false)+`,`+first+`}`), count(`{`+tools(true)+`,`+first+`}`); some >= all-100 {
		t.Errorf("count_tokens: %d with deferred tools, %d with all rendered", some, all)
	}

	loaded := `"messages":[{"role":"user","content":"Open an issue"},
		{"role":"assistant","content":[{"type":"tool_use","id":"s1","name":"ToolSearch","input":{"query":"issue"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"s1","content":[{"type":"tool_reference","tool_name":"mcp__gh__create_issue"}]}]}`
	p = prompt(`{"max_tokens":10,` + tools(true) + `,` + loaded + `]}`)
	if !strings.Contains(p, "Opens an issue") || strings.Contains(p, "mcp__gh__merge_pr") ||
		!strings.Contains(p, "<tool_response>\nmcp__gh__create_issue\n</tool_response>") {
		t.Errorf("after the reference the prompt should offer create_issue alone of the deferred tools:\n%s", p)
	}

	changed := loaded + `,{"role":"system","content":[
			{"type":"tool_removal","tool":{"type":"tool_reference","name":"Read"}},
			{"type":"tool_addition","tool":{"type":"tool_reference","name":"mcp__gh__merge_pr"}},
			{"type":"tool_addition","tool":{"type":"tool_definition","definition":{"name":"Lint","description":"Lints the tree","input_schema":{"type":"object"}}}}]},
		{"role":"user","content":"go on"}]`
	p = prompt(`{"max_tokens":10,` + tools(true) + `,` + changed + `}`)
	for _, want := range []string{"Opens an issue", "Merges a pull request", "Lints the tree", "Loads deferred tools"} {
		if !strings.Contains(p, want) {
			t.Errorf("after the system message's changes the prompt lacks %q:\n%s", want, p)
		}
	}
	if strings.Contains(p, "Reads a file") {
		t.Errorf("Read was removed but is still offered:\n%s", p)
	}

	resp, text := do(t, post(t, ts.URL+"/v1/messages", `{"max_tokens":10,`+tools(true)+`,`+strings.ReplaceAll(loaded, "mcp__gh__create_issue", "mcp__gh__delete_repo")+`]}`))
	if resp.StatusCode != 400 || !strings.Contains(text, "mcp__gh__delete_repo") || !strings.Contains(text, "invalid_request_error") {
		t.Errorf("a reference to an unknown tool: status %d: %s", resp.StatusCode, text)
	}
}

// TestToolAdditionsBounded: tools defined by tool_addition count toward
// MaxTools with the request's own; one past it is a 400 naming the bound,
// as too many tools in the request are.
func TestToolAdditionsBounded(t *testing.T) {
	ts := newTestServer(t, service.Options{CacheBytes: -1}, Options{}, func(string) string { return "</think>\n\nok" })
	body := func(additions int) string {
		blocks := make([]string, additions)
		for i := range blocks {
			blocks[i] = `{"type":"tool_addition","tool":{"type":"tool_definition","definition":{"name":"t` + strconv.Itoa(i) + `","input_schema":{"type":"object"}}}}`
		}
		return `{"model":"m","max_tokens":8,"tools":[{"name":"base","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"},{"role":"system","content":[` +
			strings.Join(blocks, ",") + `]},{"role":"user","content":"go"}]}`
	}
	if resp, text := do(t, post(t, ts.URL+"/v1/messages/count_tokens", body(MaxTools-1))); resp.StatusCode != 200 {
		t.Errorf("%d tools in all: %d %s", MaxTools, resp.StatusCode, text)
	}
	resp, text := do(t, post(t, ts.URL+"/v1/messages/count_tokens", body(MaxTools)))
	if want := "makes the tools more than the " + strconv.Itoa(MaxTools) + " allowed"; resp.StatusCode != 400 || !strings.Contains(text, want) {
		t.Errorf("%d tools in all: %d %s, want a 400 saying %q", MaxTools+1, resp.StatusCode, text, want)
	}
}
