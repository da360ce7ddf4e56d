package reply

// Kind says what an [Event] carries.
type Kind uint8

// The kinds of event. A tool call is reported as KindToolStart, then any
// number of KindToolArgs fragments whose concatenation is the call's
// arguments as a JSON object, then KindToolEnd.
const (
	KindReasoning Kind = iota + 1 // Text is reasoning
	KindContent                   // Text is answer content
	KindToolStart                 // a call begins: Index, ID and Name are set
	KindToolArgs                  // Text is the next fragment of call Index's arguments
	KindToolEnd                   // call Index is complete
)

// String names the kind for logs and test output.
func (k Kind) String() string {
	switch k {
	case KindReasoning:
		return "reasoning"
	case KindContent:
		return "content"
	case KindToolStart:
		return "tool_start"
	case KindToolArgs:
		return "tool_args"
	case KindToolEnd:
		return "tool_end"
	}
	return "unknown"
}

// Event is one step of the parse.
type Event struct {
	Kind  Kind
	Text  string // reasoning or content text, or an arguments fragment
	Index int    // which tool call (0, 1, ...) for the tool kinds
	ID    string // the call's id, on KindToolStart
	Name  string // the function name, on KindToolStart
}

// ToolCall is one complete tool call.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // a JSON object
}

// Result is a whole parse: what the events of a stream add up to.
type Result struct {
	Reasoning string     `json:"reasoning"`
	Content   string     `json:"content"`
	ToolCalls []ToolCall `json:"tool_calls"`
}

// Add folds one event into r. Events of a tool call that r has not seen
// start are ignored, so Add never panics on a stream that was cut short.
func (r *Result) Add(e Event) {
	switch e.Kind {
	case KindReasoning:
		r.Reasoning += e.Text
	case KindContent:
		r.Content += e.Text
	case KindToolStart:
		r.ToolCalls = append(r.ToolCalls, ToolCall{ID: e.ID, Name: e.Name})
	case KindToolArgs:
		if e.Index >= 0 && e.Index < len(r.ToolCalls) {
			r.ToolCalls[e.Index].Arguments += e.Text
		}
	}
}
