package api

import (
	"encoding/json"
	"fmt"

	"petal/engine/chattemplate"
)

// responsesTool is a tool of the Responses API: function fields at the top
// level, not under "function". It is kept as sent, since the response
// echoes the tools back (a web_search tool with its options included).
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	// Format is a custom tool's input format: text, or a grammar.
	Format *struct {
		Type       string `json:"type"`
		Syntax     string `json:"syntax"`
		Definition string `json:"definition"`
	} `json:"format"`
	// Tools are a namespace's function and custom tools.
	Tools []responsesTool `json:"tools"`
	raw   json.RawMessage
}

func (t *responsesTool) UnmarshalJSON(b []byte) error {
	type fields responsesTool
	var f fields
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*t = responsesTool(f)
	t.raw = append(json.RawMessage(nil), b...)
	return nil
}

func (t responsesTool) MarshalJSON() ([]byte, error) {
	if t.raw != nil {
		return t.raw, nil
	}
	type fields responsesTool
	return json.Marshal(fields(t))
}

// modelTool is what a tool the model is offered stands for: a function or
// a custom tool (OpenAI's free-form tools, which Codex's apply_patch is),
// maybe in a namespace (Codex groups each MCP server's tools in one).
type modelTool struct {
	custom          bool
	name, namespace string
}

// namespaceSeparator joins a namespace and a tool's name into the one name
// the model calls, as Codex named MCP tools before namespaces.
const namespaceSeparator = "__"

func modelName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + namespaceSeparator + name
}

// customInput is the one parameter under which the model gives a custom
// tool its free-form input: a chat template offers functions with JSON
// schemas only.
const customInput = "input"

// offerTools maps the tools the client runs to the template's functions:
// functions as they are, custom tools as a function of one string, and
// those of a namespace under their joined names. Hosted tools
// (web_search, file_search, ...) are the API provider's to run and are
// not offered. byName tells what each offered name stands for.
func offerTools(tools []responsesTool, namespace string, out []chattemplate.Tool, byName map[string]modelTool) ([]chattemplate.Tool, error) {
	for i, t := range tools {
		var params json.RawMessage
		switch t.Type {
		case "function":
			params = t.Parameters
			if len(params) == 0 || string(params) == "null" {
				params = json.RawMessage(emptySchema)
			}
		case "custom":
			params = customSchema(t)
		case "namespace":
			if namespace != "" {
				return nil, badParam("tools", "namespace %q holds namespace %q; a namespace holds function and custom tools", namespace, t.Name)
			}
			if t.Name == "" {
				return nil, badParam("tools", "tool %d, a namespace, needs a name", i)
			}
			var err error
			if out, err = offerTools(t.Tools, t.Name, out, byName); err != nil {
				return nil, err
			}
			continue
		default:
			continue
		}
		if t.Name == "" {
			return nil, badParam("tools", "tool %d needs a name", i)
		}
		name := modelName(namespace, t.Name)
		byName[name] = modelTool{custom: t.Type == "custom", name: t.Name, namespace: namespace}
		out = append(out, chattemplate.Tool{Type: "function",
			Function: chattemplate.FunctionDef{Name: name, Description: t.Description, Parameters: params}})
	}
	if len(out) > MaxTools {
		return nil, badParam("tools", "%d tools are more than the %d allowed", len(out), MaxTools)
	}
	return out, nil
}

// customSchema is the function schema a custom tool is offered with: its
// input as one string, described by its format.
func customSchema(t responsesTool) json.RawMessage {
	desc := "The tool's input, as free-form text."
	if f := t.Format; f != nil && f.Type == "grammar" {
		desc = fmt.Sprintf("The tool's input, as text that follows this %s grammar:\n%s", f.Syntax, f.Definition)
	}
	schema, _ := json.Marshal(map[string]any{"type": "object",
		"properties": map[string]any{customInput: map[string]string{"type": "string", "description": desc}},
		"required":   []string{customInput}})
	return schema
}

// customArguments are the arguments the model reads for a custom tool's
// call in history.
func customArguments(input string) json.RawMessage {
	raw, _ := json.Marshal(map[string]string{customInput: input})
	return raw
}

// customInputOf is a custom tool's input from the arguments the model
// gave: its one string, or the arguments as they came if the model gave
// something else.
func customInputOf(args string) string {
	var in map[string]json.RawMessage
	var s string
	if json.Unmarshal([]byte(args), &in) == nil && json.Unmarshal(in[customInput], &s) == nil {
		return s
	}
	return args
}
