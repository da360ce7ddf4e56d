package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Message is one chat message as OpenAI-shaped clients send it.
type Message struct {
	Role string `json:"role"`
	// Content is nil when the message has no content field; a Content with
	// neither Text nor Parts stands for an explicit null.
	Content *Content `json:"content,omitempty"`
	// ReasoningContent is the thinking of an assistant turn in history.
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	Name             string     `json:"name,omitempty"`
}

// Content is a message's content: a string or an array of parts.
type Content struct {
	Text  *string
	Parts []ContentPart
}

// TextContent returns string content.
func TextContent(s string) *Content { return &Content{Text: &s} }

// UnmarshalJSON accepts a string, an array of parts or null.
func (c *Content) UnmarshalJSON(b []byte) error {
	*c = Content{}
	switch firstByte(b) {
	case 'n':
		return nil
	case '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		c.Text = &s
		return nil
	case '[':
		parts := []ContentPart{}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		c.Parts = parts
		return nil
	}
	return errors.New("chattemplate: message content must be a string, an array of parts or null")
}

// MarshalJSON writes the content back in the shape it came in.
func (c Content) MarshalJSON() ([]byte, error) {
	switch {
	case c.Text != nil:
		return json.Marshal(*c.Text)
	case c.Parts != nil:
		return json.Marshal(c.Parts)
	}
	return []byte("null"), nil
}

// ContentPart is one element of array content. Parts other than text
// (images, audio) keep all their fields, since templates test for them.
type ContentPart struct {
	Type string
	Text string
	raw  json.RawMessage
}

// UnmarshalJSON keeps the part as sent and reads its type and text.
func (p *ContentPart) UnmarshalJSON(b []byte) error {
	if firstByte(b) != '{' {
		return errors.New("chattemplate: a content part must be a JSON object")
	}
	var f struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*p = ContentPart{Type: f.Type, Text: f.Text, raw: append(json.RawMessage(nil), b...)}
	return nil
}

// MarshalJSON writes the part as it was sent, or its type and text.
func (p ContentPart) MarshalJSON() ([]byte, error) {
	if p.raw != nil {
		return p.raw, nil
	}
	return json.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{p.Type, p.Text})
}

// ToolCall is an assistant's call of a tool, in history.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and holds its arguments as raw JSON: an
// object, or a string holding an object as OpenAI clients send it.
type FunctionCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Tool is one entry of a request's tools. The template sees it exactly as
// sent, key order and unknown fields included; Function gives typed access.
type Tool struct {
	Type     string
	Function FunctionDef
	raw      json.RawMessage
}

// FunctionDef describes a callable function; Parameters is its JSON schema.
type FunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// UnmarshalJSON keeps the tool as sent and reads its typed fields.
func (t *Tool) UnmarshalJSON(b []byte) error {
	if firstByte(b) != '{' {
		return errors.New("chattemplate: a tool must be a JSON object")
	}
	var f struct {
		Type     string      `json:"type"`
		Function FunctionDef `json:"function"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("chattemplate: tool: %w", err)
	}
	*t = Tool{Type: f.Type, Function: f.Function, raw: append(json.RawMessage(nil), b...)}
	return nil
}

// MarshalJSON writes the tool as it was sent, or its typed fields.
func (t Tool) MarshalJSON() ([]byte, error) {
	if t.raw != nil {
		return t.raw, nil
	}
	return json.Marshal(struct {
		Type     string      `json:"type"`
		Function FunctionDef `json:"function"`
	}{t.Type, t.Function})
}

func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}
