package reply

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the want sections of testdata/*.txtar")

// goldenCase is one testdata/*.txtar file: a free-form comment, then the
// sections "options" (JSON: thinking, OpenAI tools), "input" (the generated
// text; the newline that ends the section is not part of it) and "want"
// (the Result as JSON).
type goldenCase struct {
	comment string
	files   map[string]string
	order   []string
}

func readTxtar(data string) goldenCase {
	c := goldenCase{files: map[string]string{}}
	name := ""
	var cur strings.Builder
	finish := func() {
		if name != "" {
			c.files[name] = cur.String()
			c.order = append(c.order, name)
		} else {
			c.comment = cur.String()
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(data, "\n") {
		t := strings.TrimRight(line, "\n")
		if strings.HasPrefix(t, "-- ") && strings.HasSuffix(t, " --") && len(t) > 6 {
			finish()
			name = t[3 : len(t)-3]
			continue
		}
		cur.WriteString(line)
	}
	finish()
	return c
}

func (c goldenCase) format() string {
	var b strings.Builder
	b.WriteString(c.comment)
	for _, n := range c.order {
		fmt.Fprintf(&b, "-- %s --\n%s", n, c.files[n])
	}
	return b.String()
}

// caseOptions decodes a case's options section.
func caseOptions(t *testing.T, raw string) Options {
	t.Helper()
	var o struct {
		Thinking bool            `json:"thinking"`
		Tools    json.RawMessage `json:"tools"`
	}
	if strings.TrimSpace(raw) != "" {
		if err := json.Unmarshal([]byte(raw), &o); err != nil {
			t.Fatalf("options: %v", err)
		}
	}
	opts := Options{Thinking: o.Thinking, NewID: testID}
	if len(o.Tools) > 0 {
		tools, err := ToolsFromOpenAI(o.Tools)
		if err != nil {
			t.Fatal(err)
		}
		opts.Tools = tools
	}
	return opts
}

func testID(i int) string { return fmt.Sprintf("call_%d", i) }

func TestGolden(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txtar")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c := readTxtar(string(data))
			input, ok := c.files["input"]
			if !ok {
				t.Fatal("no input section")
			}
			input = strings.TrimSuffix(input, "\n")
			opts := caseOptions(t, c.files["options"])
			got, err := Parse(input, opts)
			if err != nil {
				t.Fatal(err)
			}
			var enc bytes.Buffer
			e := json.NewEncoder(&enc)
			e.SetEscapeHTML(false) // keep tags readable in the files
			e.SetIndent("", "  ")
			if err := e.Encode(got); err != nil {
				t.Fatal(err)
			}
			gotJSON := enc.Bytes()
			for i, call := range got.ToolCalls {
				if !json.Valid([]byte(call.Arguments)) {
					t.Errorf("call %d: arguments are not JSON: %s", i, call.Arguments)
				}
			}
			// Token-by-token (byte-by-byte here) must agree with the whole.
			if streamed := parseSplit(t, input, opts, everyByte(len(input))); !equalResults(streamed, got) {
				t.Errorf("byte-by-byte parse differs:\n%+v\nwhole:\n%+v", streamed, got)
			}
			if *update {
				if _, ok := c.files["want"]; !ok {
					c.order = append(c.order, "want")
				}
				c.files["want"] = string(gotJSON)
				if err := os.WriteFile(path, []byte(c.format()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if want := c.files["want"]; !bytes.Equal(gotJSON, []byte(want)) {
				t.Errorf("got:\n%s\nwant:\n%s", gotJSON, want)
			}
		})
	}
}

func everyByte(n int) []int {
	cuts := make([]int, 0, n)
	for i := 1; i < n; i++ {
		cuts = append(cuts, i)
	}
	return cuts
}
