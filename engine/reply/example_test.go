package reply_test

import (
	"fmt"

	"petal/engine/reply"
)

// A reply streamed token by token: reasoning, then a tool call whose typed
// argument is converted by the tool's schema.
func ExampleParser() {
	tools, err := reply.ToolsFromOpenAI([]byte(`[{"type":"function","function":{"name":"get_weather",
		"parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}]`))
	if err != nil {
		panic(err)
	}
	p, err := reply.New(reply.Options{Thinking: true, Tools: tools, NewID: func(i int) string { return fmt.Sprint("call_", i) }})
	if err != nil {
		panic(err)
	}
	tokens := []string{"Need", " the forecast.", "\n", "</think>", "\n\n", "<tool_call>", "\n", "<function=get", "_weather>",
		"\n<parameter=city>\n", "Paris", "\n</parameter>\n", "<parameter=days>\n", "3", "\n</parameter>\n", "</function>", "\n", "</tool_call>"}
	for _, tok := range tokens {
		for _, e := range p.Feed(tok) {
			fmt.Printf("%s %q\n", e.Kind, e.Text+e.Name)
		}
	}
	for _, e := range p.Close() {
		fmt.Printf("%s %q\n", e.Kind, e.Text)
	}
	// Output:
	// reasoning "Need"
	// reasoning " the forecast."
	// tool_start "get_weather"
	// tool_args "{"
	// tool_args "\"city\":\""
	// tool_args "Paris"
	// tool_args "\",\"days\":"
	// tool_args "3"
	// tool_args "}"
	// tool_end ""
}
