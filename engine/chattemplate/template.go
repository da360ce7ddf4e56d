package chattemplate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/builtins/methods"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/parser"
)

// Template is a parsed chat template, safe for concurrent renders.
type Template struct {
	tpl *exec.Template
	// vars are the tokenizer's special tokens (bos_token, eos_token...),
	// which transformers passes to every render.
	vars map[string]any
	// format is what RenderRequest adapts messages to.
	format contentFormat
}

// Input is what one render takes.
type Input struct {
	Messages []Message
	// Tools is nil when the request has none; the template then sees None.
	Tools               []Tool
	AddGenerationPrompt bool
	// Kwargs are extra template variables (chat_template_kwargs):
	// enable_thinking, preserve_thinking and any other the template reads.
	Kwargs map[string]json.RawMessage
}

// reserved are the variables a render sets itself.
var reserved = map[string]bool{"messages": true, "tools": true, "add_generation_prompt": true, "documents": true}

// rootName names the template inside its one-entry loader.
const rootName = "/chat_template"

// The statements Hugging Face's environment has (Jinja's built-in ones and
// loop controls); include, import and extends have no loader there.
var statementNames = []string{"if", "for", "set", "macro", "call", "filter", "raw", "with", "autoescape", "break", "continue"}

var filterNames = []string{
	"abs", "attr", "batch", "capitalize", "center", "default", "d", "dictsort", "e", "escape",
	"filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "join",
	"last", "length", "count", "list", "lower", "map", "max", "min", "rejectattr",
	"reject", "replace", "reverse", "round", "safe", "selectattr", "select", "slice", "sort",
	"striptags", "sum", "title", "trim", "truncate", "unique", "upper", "urlencode",
	"urlize", "wordcount", "wordwrap", "xmlattr",
}

var strMethodNames = []string{
	"capitalize", "casefold", "center", "count", "endswith", "expandtabs", "find", "format",
	"format_map", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric",
	"isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition",
	"removeprefix", "removesuffix", "replace", "rfind", "rjust", "rpartition", "rsplit", "rstrip",
	"split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill",
}

// environment is shared by all templates; nothing writes to it after init.
var environment = newEnvironment()

func newEnvironment() *exec.Environment {
	statements := exec.NewControlStructureSet(map[string]parser.ControlStructureParser{})
	for _, name := range statementNames {
		p, ok := controlStructures.All.Get(name)
		if !ok {
			panic("chattemplate: gonja lacks statement " + name)
		}
		_ = statements.Register(name, p)
	}
	_ = statements.Register("generation", generationParser)

	filters := exec.NewFilterSet(map[string]exec.FilterFunction{})
	for _, name := range filterNames {
		f, ok := builtins.Filters.Get(name)
		if !ok {
			panic("chattemplate: gonja lacks filter " + name)
		}
		_ = filters.Register(name, guardFilter(name, f))
	}
	_ = filters.Register("tojson", guardFilter("tojson", tojsonFilter))
	_ = filters.Register("items", guardFilter("items", itemsFilter))
	_ = filters.Register("string", guardFilter("string", stringFilter))

	str := map[string]exec.Method[string]{}
	for _, name := range strMethodNames {
		m, ok := methods.All.Str.Get(name)
		if !ok {
			panic("chattemplate: gonja lacks str method " + name)
		}
		str[name] = guardMethod(name, m)
	}
	dict := map[string]exec.Method[map[string]any]{}
	for _, name := range []string{"keys", "values", "items", "get", "copy"} {
		dict[name] = dictMethod(name)
	}
	list := map[string]exec.Method[[]any]{}
	if m, ok := methods.All.List.Get("copy"); ok {
		list["copy"] = m
	}

	globals := exec.NewContext(map[string]any{
		"raise_exception": raiseException,
		"strftime_now":    strftimeNow,
		"range":           rangeFn,
		strFunc:           strFn,
		opFunc:            opFn,
	})
	for _, name := range []string{"namespace", "dict", "cycler", "joiner"} {
		f, ok := builtins.GlobalFunctions.Get(name)
		if !ok {
			panic("chattemplate: gonja lacks global " + name)
		}
		globals.Set(name, f)
	}
	return &exec.Environment{
		Context:           globals,
		Filters:           filters,
		Tests:             builtins.Tests,
		ControlStructures: statements,
		Methods: exec.Methods{
			Bool:  methods.All.Bool,
			Int:   methods.All.Int,
			Float: methods.All.Float,
			Str:   exec.NewMethodSet(str),
			Dict:  exec.NewMethodSet(dict),
			List:  exec.NewMethodSet(list),
		},
	}
}

// Parse compiles template source with Hugging Face's settings.
func Parse(source string) (t *Template, err error) {
	if len(source) > MaxTemplateBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrBadTemplate, len(source), MaxTemplateBytes)
	}
	if err := checkSource(source); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("%w: parser failed: %v", ErrBadTemplate, p)
		}
	}()
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	loader, err := loaders.NewMemoryLoader(map[string]string{rootName: source})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTemplate, err)
	}
	tpl, err := exec.NewTemplate(rootName, cfg, loader, environment)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTemplate, cleanError(err))
	}
	instrument(tpl.Root())
	return &Template{tpl: tpl, vars: map[string]any{}, format: detectFormat(source)}, nil
}

// Render renders the conversation. A template that raises gives a
// *RaiseError; one that crosses a limit an error wrapping ErrLimit; one
// that fails otherwise an error wrapping ErrRender.
func (t *Template) Render(ctx context.Context, in Input) (out string, err error) {
	if len(in.Messages) == 0 {
		// transformers refuses this before rendering, whatever the template.
		return "", fmt.Errorf("%w: no messages to render", ErrBadInput)
	}
	data, err := in.data(ctx, t.vars)
	if err != nil {
		return "", err
	}
	s := newRenderState(ctx)
	data[stateKey] = s
	var b strings.Builder
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("%w: %v", ErrRender, p)
		}
	}()
	execErr := t.tpl.Execute(&b, exec.NewContext(data))
	if s.failure != nil {
		return "", s.failure
	}
	if execErr != nil {
		if strings.Contains(execErr.Error(), ErrLimit.Error()) {
			// A string method hit a limit; methods cannot reach the state.
			return "", fmt.Errorf("%w: %s", ErrLimit, cleanError(execErr))
		}
		return "", fmt.Errorf("%w: %s", ErrRender, cleanError(execErr))
	}
	return b.String(), nil
}

// ErrRender marks a template that failed on its input in a way other than
// raising: a type error, an unknown filter, a bad call.
var ErrRender = errors.New("chattemplate: template failed")

// cleanError drops gonja's stack of "unable to ..." wrappers from the
// message but keeps its innermost cause.
func cleanError(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && i+2 < len(msg) {
		return msg[i+2:]
	}
	return msg
}

// inputError marks a conversion failure as bad input, unless the request was
// cancelled meanwhile, which is no fault of its input.
func inputError(ctx context.Context, err error, format string, args ...any) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: %s: %v", ErrBadInput, fmt.Sprintf(format, args...), err)
}

func (in Input) data(ctx context.Context, vars map[string]any) (map[string]any, error) {
	data := make(map[string]any, len(vars)+len(in.Kwargs)+3)
	for k, v := range vars {
		data[k] = v
	}
	for k, raw := range in.Kwargs {
		if reserved[k] {
			return nil, fmt.Errorf("%w: template kwarg %q is set by the renderer", ErrBadInput, k)
		}
		v, err := decodeOrdered(ctx, raw)
		if err != nil {
			return nil, inputError(ctx, err, "template kwarg %q", k)
		}
		data[k] = v
	}
	msgs := make([]any, 0, len(in.Messages))
	for i, m := range in.Messages {
		d, err := messageValue(ctx, m)
		if err != nil {
			return nil, inputError(ctx, err, "message %d", i)
		}
		msgs = append(msgs, d)
	}
	data["messages"] = msgs
	if in.Tools != nil {
		tools := make([]any, 0, len(in.Tools))
		for i, tool := range in.Tools {
			raw, err := tool.MarshalJSON()
			if err != nil {
				return nil, fmt.Errorf("%w: tool %d: %v", ErrBadInput, i, err)
			}
			v, err := decodeOrdered(ctx, raw)
			if err != nil {
				return nil, inputError(ctx, err, "tool %d", i)
			}
			tools = append(tools, v)
		}
		data["tools"] = tools
	}
	data["add_generation_prompt"] = in.AddGenerationPrompt
	return data, nil
}
