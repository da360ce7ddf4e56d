package reply

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Tool is a function the model may call: its name and the JSON schema of
// its arguments object (OpenAI's "parameters"). Only the schema's
// "properties" are read, to learn each parameter's type.
type Tool struct {
	Name       string
	Parameters json.RawMessage
}

// ToolsFromOpenAI reads an OpenAI "tools" array
// ([{"type":"function","function":{"name":...,"parameters":{...}}}]).
// Entries of another type are skipped.
func ToolsFromOpenAI(data []byte) ([]Tool, error) {
	var raw []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("reply: reading tools: %w", err)
	}
	var tools []Tool
	for _, t := range raw {
		if t.Type != "" && t.Type != "function" {
			continue
		}
		tools = append(tools, Tool{Name: t.Function.Name, Parameters: t.Function.Parameters})
	}
	return tools, nil
}

// valueKind is the JSON type a parameter's text is converted to.
type valueKind uint8

const (
	kindString valueKind = iota // verbatim
	kindAny                     // JSON if the text is JSON, else a string
	kindInteger
	kindNumber
	kindBoolean
	kindObject
	kindArray
	kindNull
)

// paramType is what the schema says about one parameter.
type paramType struct {
	kind     valueKind
	nullable bool // the schema admits null besides kind
}

// streams reports whether values of this type are emitted as they are
// generated. Only plain strings can be: every other type needs the whole
// value before it can be converted.
func (t paramType) streams() bool { return t.kind == kindString && !t.nullable }

// function is the schema of one tool: its parameters' types, or nil
// properties when the schema names none.
type function struct {
	properties map[string]paramType
}

// typeOf returns the type of parameter name; parameters the schema does not
// describe are strings.
func (f *function) typeOf(name string) paramType {
	if f == nil {
		return paramType{kind: kindString}
	}
	if t, ok := f.properties[name]; ok {
		return t
	}
	return paramType{kind: kindString}
}

// knows reports whether the schema lists parameter name; without a schema
// every name is possible.
func (f *function) knows(name string) bool {
	if f == nil || f.properties == nil {
		return true
	}
	_, ok := f.properties[name]
	return ok
}

// compileTools reads the schemas of tools.
func compileTools(tools []Tool) (map[string]*function, error) {
	out := make(map[string]*function, len(tools))
	for _, t := range tools {
		f := &function{}
		if len(bytes.TrimSpace(t.Parameters)) > 0 && string(bytes.TrimSpace(t.Parameters)) != "null" {
			var schema struct {
				Properties map[string]json.RawMessage `json:"properties"`
			}
			if err := json.Unmarshal(t.Parameters, &schema); err != nil {
				return nil, fmt.Errorf("reply: parameters schema of tool %q: %w", t.Name, err)
			}
			if schema.Properties != nil {
				f.properties = make(map[string]paramType, len(schema.Properties))
				for name, raw := range schema.Properties {
					f.properties[name] = schemaType(raw)
				}
			}
		}
		out[t.Name] = f
	}
	return out, nil
}

// schemaType reads a property's JSON schema. Unions ("type" lists, anyOf,
// oneOf) take their first non-null member, as Qwen's own parsers do.
func schemaType(raw json.RawMessage) paramType {
	var s struct {
		Type       json.RawMessage   `json:"type"`
		AnyOf      []json.RawMessage `json:"anyOf"`
		OneOf      []json.RawMessage `json:"oneOf"`
		Enum       []any             `json:"enum"`
		Properties json.RawMessage   `json:"properties"`
		Items      json.RawMessage   `json:"items"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return paramType{kind: kindAny} // true, false or junk: nothing to go by
	}
	if len(s.Type) > 0 {
		var one string
		if json.Unmarshal(s.Type, &one) == nil {
			k := typeName(one)
			if k == kindNull {
				return paramType{kind: kindNull, nullable: true}
			}
			return paramType{kind: k}
		}
		var many []string
		if json.Unmarshal(s.Type, &many) == nil {
			return union(many)
		}
		return paramType{kind: kindAny}
	}
	if alts := append(s.AnyOf, s.OneOf...); len(alts) > 0 {
		t := paramType{kind: kindString}
		picked := false
		for _, a := range alts {
			at := schemaType(a)
			switch {
			case at.kind == kindNull:
				t.nullable = true
			case !picked:
				t.kind, picked = at.kind, true
				t.nullable = t.nullable || at.nullable
			}
		}
		return t
	}
	switch {
	case len(s.Enum) > 0:
		for _, v := range s.Enum {
			if _, ok := v.(string); !ok {
				return paramType{kind: kindAny}
			}
		}
		return paramType{kind: kindString}
	case len(s.Properties) > 0:
		return paramType{kind: kindObject}
	case len(s.Items) > 0:
		return paramType{kind: kindArray}
	}
	return paramType{kind: kindString}
}

// union reads a "type" list such as ["integer", "null"].
func union(names []string) paramType {
	t := paramType{kind: kindString}
	picked := false
	for _, n := range names {
		k := typeName(n)
		switch {
		case k == kindNull:
			t.nullable = true
		case !picked:
			t.kind, picked = k, true
		}
	}
	if !picked && t.nullable {
		t.kind = kindNull
	}
	return t
}

// typeName maps a schema type name to a kind, accepting the loose names
// (int32, float, bool, dict, list, ...) that tool authors write and that
// Qwen's own parser accepts.
func typeName(name string) valueKind {
	n := strings.ToLower(strings.TrimSpace(name))
	switch {
	case n == "string" || n == "str" || n == "text" || n == "varchar" || n == "char" || n == "enum":
		return kindString
	case strings.HasPrefix(n, "int") || strings.HasPrefix(n, "uint") || strings.HasPrefix(n, "long") ||
		strings.HasPrefix(n, "short") || strings.HasPrefix(n, "unsigned"):
		return kindInteger
	case strings.HasPrefix(n, "num") || strings.HasPrefix(n, "float") || n == "double":
		return kindNumber
	case n == "boolean" || n == "bool" || n == "binary":
		return kindBoolean
	case n == "object" || strings.HasPrefix(n, "dict"):
		return kindObject
	case n == "array" || n == "arr" || strings.HasPrefix(n, "list"):
		return kindArray
	case n == "null":
		return kindNull
	}
	return kindAny
}

// maxExactInteger is the largest integer a float64 holds exactly; integral
// numbers up to it are written without a fraction, as Python's parser does.
const maxExactInteger = 1 << 53

// convert returns the JSON for value v of type t. Text that does not parse
// as the type stays a string, so nothing the model wrote is lost.
func convert(v string, t paramType) []byte {
	trimmed := strings.TrimSpace(v)
	lower := strings.ToLower(trimmed)
	isNull := lower == "null" || lower == "none"
	if isNull && (t.nullable || t.kind != kindString) {
		return []byte("null")
	}
	switch t.kind {
	case kindInteger:
		if s, ok := integer(trimmed); ok {
			return []byte(s)
		}
	case kindNumber:
		if s, ok := number(trimmed); ok {
			return []byte(s)
		}
	case kindBoolean:
		if lower == "true" || lower == "false" {
			return []byte(lower)
		}
	case kindObject, kindArray, kindAny:
		if trimmed != "" && json.Valid([]byte(trimmed)) {
			var buf bytes.Buffer
			if json.Compact(&buf, []byte(trimmed)) == nil {
				return buf.Bytes()
			}
		}
	}
	return appendString(nil, v)
}

// integer returns s as a canonical JSON integer if it is one: optional sign,
// decimal digits only.
func integer(s string) (string, bool) {
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	if s == "" {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return "", false
		}
	}
	s = strings.TrimLeft(s, "0")
	if s == "" {
		return "0", true
	}
	if neg {
		return "-" + s, true
	}
	return s, true
}

// number returns s as a JSON number if it is a finite decimal number.
func number(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
			return "", false // rejects inf, nan, hex and underscores
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", false
	}
	if f == math.Trunc(f) && math.Abs(f) <= maxExactInteger {
		return strconv.FormatInt(int64(f), 10), true
	}
	b, err := json.Marshal(f)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// appendString appends s as a JSON string. Bytes are copied as they are
// (the caller's text is UTF-8 already), so escaping a text in pieces gives
// the same bytes as escaping it whole.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendEscaped(dst, s)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendEscaped appends s escaped for the inside of a JSON string.
func appendEscaped(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	return append(dst, s[start:]...)
}
