package api

import (
	"encoding/json"

	"petal/internal/service"
)

// openAIToolChoice reads OpenAI's tool_choice, in chat's shapes and the
// Responses API's: "auto", "none", "required", a function named as
// {"type":"function","function":{"name":...}} (chat) or
// {"type":"function","name":...} (Responses). A choice of a hosted tool
// (web search, file search, ...), which Petal does not run, is auto.
func openAIToolChoice(raw json.RawMessage) (service.ToolChoice, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return service.ToolChoice{}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return toolMode("tool_choice", s, "auto, none or required")
	}
	var o struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return service.ToolChoice{}, badParam("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}")
	}
	if o.Type != "function" {
		return service.ToolChoice{}, nil
	}
	name := o.Function.Name
	if name == "" {
		name = o.Name
	}
	if name == "" {
		return service.ToolChoice{}, badParam("tool_choice", "tool_choice of type function needs the function's name")
	}
	return service.ToolChoice{Mode: service.ToolsRequired, Name: name}, nil
}

// functionCall reads the legacy function_call: "auto", "none" or
// {"name":...}.
func functionCall(raw json.RawMessage) (service.ToolChoice, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return service.ToolChoice{}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return toolMode("function_call", s, "auto or none")
	}
	var o struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &o) != nil || o.Name == "" {
		return service.ToolChoice{}, badParam("function_call", "function_call must be \"auto\", \"none\" or {\"name\":...}")
	}
	return service.ToolChoice{Mode: service.ToolsRequired, Name: o.Name}, nil
}

// toolMode reads a choice given as a word.
func toolMode(param, word, words string) (service.ToolChoice, error) {
	switch {
	case word == "auto":
		return service.ToolChoice{}, nil
	case word == "none":
		return service.ToolChoice{Mode: service.ToolsNone}, nil
	case word == "required" && param == "tool_choice":
		return service.ToolChoice{Mode: service.ToolsRequired}, nil
	}
	return service.ToolChoice{}, badParam(param, "%s must be %s, not %q", param, words, word)
}

// anthropicToolChoice reads the Messages API's tool_choice: {"type":"auto"},
// {"type":"any"}, {"type":"tool","name":...} or {"type":"none"}.
func anthropicToolChoice(typ, name string) (service.ToolChoice, error) {
	switch typ {
	case "", "auto":
		return service.ToolChoice{}, nil
	case "none":
		return service.ToolChoice{Mode: service.ToolsNone}, nil
	case "any":
		return service.ToolChoice{Mode: service.ToolsRequired}, nil
	case "tool":
		if name == "" {
			return service.ToolChoice{}, badParam("tool_choice", "tool_choice of type tool needs the tool's name")
		}
		return service.ToolChoice{Mode: service.ToolsRequired, Name: name}, nil
	}
	return service.ToolChoice{}, badParam("tool_choice", "tool_choice type must be auto, any, tool or none, not %q", typ)
}
