package api

import (
	"fmt"
	"slices"
	"strings"

	"petal/engine/chattemplate"
)

// toolSet is the tools a Messages request offers the model, as tool search
// changes them along the conversation (Anthropic's deferred tools): a tool
// marked defer_loading is offered only once a tool_reference block in a
// tool_result, or a tool_addition in a system message, names it;
// tool_addition may also bring a definition of its own, and tool_removal
// takes a tool away. Anthropic expands each change where it comes in the
// conversation; a chat template renders one list of tools at the start,
// so the model is offered the list as it stands after the last change.
type toolSet struct {
	all   []anthropicTool // the request's tools, deferred ones included
	known map[string]int  // index in all by name
	on    map[string]bool // offered now, by name
	added []anthropicTool // definitions brought by tool_addition, in order
}

func newToolSet(tools []anthropicTool) *toolSet {
	s := &toolSet{all: tools, known: map[string]int{}, on: map[string]bool{}}
	for i, t := range tools {
		s.known[t.Name] = i
		s.on[t.Name] = !t.DeferLoading
	}
	return s
}

// reference offers a tool of the request, deferred or not, by name.
func (s *toolSet) reference(where, name string) error {
	if _, ok := s.known[name]; !ok && !slices.ContainsFunc(s.added, func(t anthropicTool) bool { return t.Name == name }) {
		return badParam("messages", "%s refers to the tool %q, which is not among the request's tools", where, name)
	}
	s.on[name] = true
	return nil
}

// add offers a tool defined in the conversation; a later definition of a
// name replaces an earlier one. The tools defined so, with the request's,
// are at most MaxTools, as the request's alone are: a body holds some
// hundred thousand small definitions, and each is checked, kept and
// offered (60,000 took 17 s of CPU before the prompt was found too long).
func (s *toolSet) add(where string, t anthropicTool) error {
	s.added = slices.DeleteFunc(s.added, func(a anthropicTool) bool { return a.Name == t.Name })
	if len(s.all)+len(s.added) >= MaxTools {
		return badParam("messages", "%s: a tool_addition makes the tools more than the %d allowed", where, MaxTools)
	}
	s.added = append(s.added, t)
	s.on[t.Name] = true
	return nil
}

func (s *toolSet) remove(name string) { s.on[name] = false }

// offered is the tools offered after the last change: the request's in
// their order, then those added, each once.
func (s *toolSet) offered() []anthropicTool {
	var out []anthropicTool
	for _, t := range s.all {
		if s.on[t.Name] && !slices.ContainsFunc(s.added, func(a anthropicTool) bool { return a.Name == t.Name }) {
			out = append(out, t)
		}
	}
	for _, t := range s.added {
		if s.on[t.Name] {
			out = append(out, t)
		}
	}
	return out
}

// toolChange is the tool of a tool_addition or tool_removal block: a
// reference to one of the request's tools by name, or (for an addition) a
// definition.
type toolChange struct {
	Type       string         `json:"type"`
	Name       string         `json:"name"`
	Definition *anthropicTool `json:"definition"`
}

// change applies a tool_addition or tool_removal block.
func (s *toolSet) change(where string, b anthropicBlock) error {
	if b.Tool == nil {
		return badParam("messages", "%s: a %s needs a tool", where, b.Type)
	}
	switch t := b.Tool; {
	case t.Type == "tool_reference" && t.Name != "":
		if b.Type == "tool_removal" {
			s.remove(t.Name)
			return nil
		}
		return s.reference(where, t.Name)
	case t.Type == "tool_definition" && b.Type == "tool_addition" && t.Definition != nil:
		if _, err := toolsOf([]anthropicTool{*t.Definition}); err != nil {
			return err
		}
		return s.add(where, *t.Definition)
	}
	if b.Type == "tool_removal" {
		return badParam("messages", "%s: a tool_removal's tool must be {\"type\":\"tool_reference\",\"name\":...}", where)
	}
	return badParam("messages", "%s: a tool_addition's tool must be {\"type\":\"tool_reference\",\"name\":...} or {\"type\":\"tool_definition\",\"definition\":{...}}", where)
}

// toolResultParts maps a tool_result's content: text as text, images
// (a screenshot, a PNG the agent read) as images, and each tool_reference
// as the name of the tool it loads, on a line of its own, while the tool
// joins the offered list. param is the content's path in the request.
func (s *toolSet) toolResultParts(where, param string, content anthropicContent, images *imageSet) ([]chattemplate.ContentPart, error) {
	parts := make([]chattemplate.ContentPart, 0, len(content))
	var names []string
	for k, b := range content {
		switch b.Type {
		case "text":
			parts = append(parts, chattemplate.ContentPart{Type: "text", Text: b.Text})
		case "image":
			part, err := images.addBlock(fmt.Sprintf("%s[%d]", param, k), b)
			if err != nil {
				return nil, err
			}
			parts = append(parts, part)
		case "tool_reference":
			if b.ToolName == "" {
				return nil, badParam("messages", "%s: a tool_reference needs a tool_name", where)
			}
			if err := s.reference(where, b.ToolName); err != nil {
				return nil, err
			}
			names = append(names, b.ToolName)
		default:
			return nil, blockError(where, b.Type)
		}
	}
	if names != nil {
		parts = append(parts, chattemplate.ContentPart{Type: "text", Text: strings.Join(names, "\n")})
	}
	return parts, nil
}
