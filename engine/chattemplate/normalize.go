package chattemplate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// partsLoop finds what vLLM's content-format detection looks for: a
// template that iterates a message's content or tests whether it is a
// string can render content given as parts; one that does neither only
// concatenates strings and fails on parts.
var partsLoop = regexp.MustCompile(`for\s+\w+\s+in\s+[\w.]*content\b|content\s+is\s+(not\s+)?(string|iterable|sequence|mapping)`)

// contentFormat records what the template takes, read from its source.
type contentFormat struct {
	// stringsOnly: the template cannot render content given as parts.
	stringsOnly bool
	// developer: the template knows the developer role itself.
	developer bool
}

func detectFormat(source string) contentFormat {
	return contentFormat{stringsOnly: !partsLoop.MatchString(source), developer: strings.Contains(source, "developer")}
}

// ErrNotText marks a content part that is not text (an image, audio) given
// to a model that reads text only.
var ErrNotText = errors.New("chattemplate: the model reads text only")

// RenderRequest renders a conversation as a chat server should, whatever
// shape the client sent it in, where Render does exactly what transformers
// does. It normalises the messages the way OpenAI's API accepts them:
// developer messages are system messages (unless the template knows the
// role), text parts become one string for templates that take only
// strings, and when the template refuses the system messages where they
// are (after the first turn, or more than one), they are merged, in order,
// into one leading system message.
func (t *Template) RenderRequest(ctx context.Context, in Input) (string, error) {
	msgs := make([]Message, len(in.Messages))
	for i, m := range in.Messages {
		if m.Role == "developer" && !t.format.developer {
			m.Role = "system"
		}
		if t.format.stringsOnly && m.Content != nil && m.Content.Parts != nil {
			text, err := flatten(m.Content)
			if err != nil {
				return "", fmt.Errorf("%w: message %d: %w", ErrBadInput, i, err)
			}
			m.Content = TextContent(text)
		}
		msgs[i] = m
	}
	in.Messages = msgs
	out, err := t.Render(ctx, in)
	if err != nil && ctx.Err() == nil {
		// Templates that iterate arguments (Qwen3.5+ with |items) fail on
		// arguments that are not an object; such history comes from
		// clients and models that got a call wrong, and refusing it would
		// end the session on every later turn.
		if wrapped, ok := objectArguments(msgs); ok {
			msgs = wrapped
			in.Messages = msgs
			out, err = t.Render(ctx, in)
		}
	}
	var raised *RaiseError
	if !errors.As(err, &raised) || !scatteredSystem(msgs) {
		return out, err
	}
	if in.Messages, err = mergeSystem(msgs); err != nil {
		return "", err
	}
	return t.Render(ctx, in)
}

// systemRole reports the roles merged into the leading system message.
func systemRole(role string) bool { return role == "system" || role == "developer" }

// scatteredSystem reports system messages other than one at the start.
func scatteredSystem(msgs []Message) bool {
	for i, m := range msgs {
		if systemRole(m.Role) && i > 0 {
			return true
		}
	}
	return false
}

// mergeSystem moves every system message's text into one leading system
// message, separated by blank lines, and keeps the others in order.
func mergeSystem(msgs []Message) ([]Message, error) {
	var texts []string
	rest := make([]Message, 0, len(msgs))
	for i, m := range msgs {
		if !systemRole(m.Role) {
			rest = append(rest, m)
			continue
		}
		text, err := flatten(m.Content)
		if err != nil {
			return nil, fmt.Errorf("%w: message %d: %w", ErrBadInput, i, err)
		}
		if text != "" {
			texts = append(texts, text)
		}
	}
	return append([]Message{{Role: "system", Content: TextContent(strings.Join(texts, "\n\n"))}}, rest...), nil
}

// flatten is content as one string: text parts joined by newlines, as vLLM
// gives them to string-only templates.
func flatten(c *Content) (string, error) {
	switch {
	case c == nil:
		return "", nil
	case c.Text != nil:
		return *c.Text, nil
	}
	texts := make([]string, 0, len(c.Parts))
	for j, p := range c.Parts {
		if !TextPart(p.Type) {
			return "", fmt.Errorf("content part %d has type %q: %w", j, p.Type, ErrNotText)
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// TextPart reports the part types that hold text: OpenAI chat's "text" and
// the Responses API's input and output text.
func TextPart(typ string) bool {
	return typ == "text" || typ == "input_text" || typ == "output_text"
}

// LooseArgumentsKey names the one parameter under which arguments that are
// not a JSON object reach a template that takes only objects: the model
// then reads the call as it was made.
const LooseArgumentsKey = "arguments"

// objectArguments wraps each tool call's arguments that are not a JSON
// object (an empty string is an empty object already, see argumentsValue)
// in an object under LooseArgumentsKey, as text; ok is false when no call
// needed it.
func objectArguments(msgs []Message) ([]Message, bool) {
	out := slices.Clone(msgs)
	changed := false
	for i := range out {
		var calls []ToolCall
		for j, c := range out[i].ToolCalls {
			text, loose := looseArguments(c.Function.Arguments)
			if !loose {
				continue
			}
			if calls == nil {
				calls = slices.Clone(out[i].ToolCalls)
			}
			raw, err := json.Marshal(map[string]string{LooseArgumentsKey: text})
			if err != nil {
				return nil, false
			}
			calls[j].Function.Arguments = raw
		}
		if calls != nil {
			out[i].ToolCalls, changed = calls, true
		}
	}
	return out, changed
}

// looseArguments reports arguments that are neither absent nor an object,
// nor a string holding one, with their text.
func looseArguments(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || firstByte(raw) == '{' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return string(bytes.TrimSpace(raw)), true
	}
	if strings.TrimSpace(s) == "" {
		return "", false
	}
	var obj map[string]json.RawMessage
	if firstByte([]byte(s)) == '{' && json.Unmarshal([]byte(s), &obj) == nil {
		return "", false
	}
	return s, true
}
