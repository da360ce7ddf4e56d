package api

import (
	"encoding/json"
	"errors"

	"petal/engine/grammar"
)

// schemaGrammar compiles a structured-output schema; one that cannot be
// enforced (a keyword outside the subset, a reference that recurses before
// any value, a schema no value obeys) is a 400 naming its keyword and
// place, before any generation, rather than answered in prose or a 500.
func schemaGrammar(param string, schema json.RawMessage) (*grammar.Grammar, error) {
	if len(schema) == 0 || string(schema) == "null" {
		return nil, badParam(param, "%s needs a schema", param)
	}
	g, err := grammar.Compile(schema)
	var se *grammar.SchemaError
	switch {
	case errors.As(err, &se) && se.Keyword == "":
		return nil, badParam(param, "%s: the schema cannot be enforced (at %q): %s", param, "#"+se.Path, se.Reason)
	case errors.As(err, &se):
		return nil, badParam(param, "%s: the schema keyword %q (at %q) cannot be enforced: %s", param, se.Keyword, "#"+se.Path, se.Reason)
	case err != nil:
		// Compile's errors are SchemaErrors; whatever else it says is
		// still about the client's schema.
		return nil, badParam(param, "%s: the schema cannot be enforced: %v", param, err)
	}
	return g, nil
}

// responseFormat reads OpenAI chat's response_format: text, json_object
// or json_schema with the schema under json_schema.
func responseFormat(raw json.RawMessage) (*grammar.Grammar, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var f struct {
		Type       string `json:"type"`
		JSONSchema struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, badParam("response_format", "response_format must be an object with a type")
	}
	return formatGrammar("response_format", f.Type, f.JSONSchema.Schema)
}

// textFormat reads the Responses API's text.format: the same types, with
// the schema beside the type.
func textFormat(raw json.RawMessage) (*grammar.Grammar, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var f struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, badParam("text.format", "text.format must be an object with a type")
	}
	return formatGrammar("text.format", f.Type, f.Schema)
}

// formatGrammar is the grammar of an OpenAI output format type.
func formatGrammar(param, typ string, schema json.RawMessage) (*grammar.Grammar, error) {
	switch typ {
	case "text":
		return nil, nil
	case "json_object":
		return grammar.JSONObject(), nil
	case "json_schema":
		return schemaGrammar(param, schema)
	}
	return nil, badParam(param, "%s type must be text, json_object or json_schema, not %q", param, typ)
}

// ollamaFormat reads Ollama's format: "json" or a schema.
func ollamaFormat(raw json.RawMessage) (*grammar.Grammar, error) {
	var s string
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, nil
	case json.Unmarshal(raw, &s) == nil:
		switch s {
		case "":
			return nil, nil
		case "json":
			return grammar.JSONObject(), nil
		}
		return nil, badParam("format", "format must be \"json\" or a JSON schema, not %q", s)
	}
	return schemaGrammar("format", raw)
}

// anthropicFormat reads the Messages API's structured outputs: the beta's
// output_format, or output_config.format.
func anthropicFormat(outputFormat json.RawMessage, outputConfig json.RawMessage) (*grammar.Grammar, error) {
	raw := outputFormat
	if len(raw) == 0 && len(outputConfig) > 0 {
		var cfg struct {
			Format json.RawMessage `json:"format"`
		}
		if json.Unmarshal(outputConfig, &cfg) == nil {
			raw = cfg.Format
		}
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var f struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(raw, &f); err != nil || f.Type != "json_schema" {
		return nil, badParam("output_format", "output_format must be {\"type\":\"json_schema\",\"schema\":{...}}")
	}
	return schemaGrammar("output_format", f.Schema)
}
