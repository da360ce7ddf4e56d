package chattemplate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// wideTool is a tool whose parameters hold n properties, the shape of the
// hostile bodies that used to cost a key scan per key.
func wideTool(tb testing.TB, n int) []Tool {
	tb.Helper()
	var b strings.Builder
	b.WriteString(`[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{"type":"string"}`, i)
	}
	b.WriteString(`}}}}]`)
	var tools []Tool
	if err := json.Unmarshal([]byte(b.String()), &tools); err != nil {
		tb.Fatal(err)
	}
	return tools
}

// TestRepeatedKeyKeepsFirstPlace pins json.loads' rule that the index of
// dictBuilder must keep: a repeated key takes the last value at the first
// key's position.
func TestRepeatedKeyKeepsFirstPlace(t *testing.T) {
	v, err := decodeOrdered(t.Context(), []byte(`{"b":1,"a":2,"b":3,"c":{"x":1,"x":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := pyJSON(&b, v, &jsonOptions{itemSep: ", ", keySep: ": "}, 0); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), `{"b": 3, "a": 2, "c": {"x": 2}}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestDecodeHonoursContext checks that a request whose client has gone stops
// converting its tools instead of finishing the work first.
func TestDecodeHonoursContext(t *testing.T) {
	tp, err := Parse(`{{ tools|length }}`)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	in := Input{Messages: []Message{{Role: "user", Content: TextContent("hi")}}, Tools: wideTool(t, 3*ctxCheckEvery)}
	if _, err := tp.Render(ctx, in); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if got, err := tp.Render(t.Context(), in); err != nil || got != "1" {
		t.Fatalf("live context: got %q, %v", got, err)
	}
}

// BenchmarkWideTool renders a tool of n properties with the Qwen3.5
// template. Time per op grows linearly in n (before dictBuilder, 10k
// properties took 5-9 s and 40k 145 s).
func BenchmarkWideTool(b *testing.B) {
	tp := loadTemplate(b, "qwen3.5")
	for _, n := range []int{1000, 10000, 40000} {
		in := Input{Messages: []Message{{Role: "user", Content: TextContent("hi")}}, Tools: wideTool(b, n), AddGenerationPrompt: true}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				if _, err := tp.Render(b.Context(), in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
