package chattemplate

import (
	"errors"
	"time"

	"petal/engine/damaged"
)

// Limits of one render. Templates come from downloaded model folders, so
// every way a template could spend time or memory has a bound.
const (
	// MaxTemplateBytes bounds the template source (real ones are < 20 KiB).
	MaxTemplateBytes = 1 << 20
	// MaxConfigBytes bounds tokenizer_config.json, which may list every
	// added token.
	MaxConfigBytes = 64 << 20
	// MaxNesting bounds brackets and blocks nested in the source, so that
	// parsing recursion stays shallow.
	MaxNesting = 100
	// MaxSteps bounds block entries during a render: loop iterations, taken
	// branches and macro calls. A 1,000-message chat takes about 30,000.
	MaxSteps = 2_000_000
	// MaxCallDepth bounds macro calls and recursive loops nested in each
	// other, which stops runaway recursion long before the Go stack's fatal
	// limit; Python's recursion limit stops Jinja at a similar depth.
	MaxCallDepth = 256
	// MaxRenderTime bounds the wall time of one render; real ones take
	// milliseconds.
	MaxRenderTime = 2 * time.Second
	// MaxStringBytes bounds any one string, list or value a template builds
	// (measured as its printed text).
	MaxStringBytes = 32 << 20
	// MaxProducedBytes bounds all text written during a render, including
	// text captured by macros and counted again when printed.
	MaxProducedBytes = 128 << 20
	// MaxRange is the largest range() a template may build; Jinja's sandbox
	// has the same bound.
	MaxRange = 100_000

	// maxValueDepth bounds nesting when printing or serialising a value.
	maxValueDepth = 128
)

var (
	// ErrLimit marks a render stopped by one of the limits above.
	ErrLimit = errors.New("chattemplate: template exceeded a limit")
	// ErrNoTemplate says a model folder has no chat template.
	ErrNoTemplate = errors.New("chattemplate: no chat template in the model folder")
	// ErrBadTemplate marks a template that does not parse or is not valid
	// for the engine: the model's files are bad ([damaged.Err]).
	ErrBadTemplate = damaged.New("chattemplate: bad chat template")
	// ErrBadInput marks messages, tools or arguments that cannot be given
	// to a template.
	ErrBadInput = errors.New("chattemplate: bad render input")
)

// RaiseError is an error the template raised itself with raise_exception,
// for example when the messages break its rules. Message is the
// template's own text, fit to show to the client.
type RaiseError struct {
	Message string
}

func (e *RaiseError) Error() string { return "chat template: " + e.Message }
