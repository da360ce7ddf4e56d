// Package chattemplate renders a checkpoint's own Jinja chat template into
// the prompt text the model was trained on.
//
// # Semantics
//
// Rendering follows what Hugging Face transformers does in
// apply_chat_template: trim_blocks and lstrip_blocks on, the loop controls
// extension, `tojson` behaving like Python's json.dumps(ensure_ascii=False)
// with object keys in the order the client sent them, and a
// `raise_exception` global whose message comes back as a [*RaiseError].
// The Jinja engine is gonja; what it lacks or does differently from Python
// (the `+`, `~` and `*` operators, `tojson`, `range`) is replaced through
// its extension points: filters, globals, and a rewrite of the parsed tree.
//
// One difference remains: gonja keeps no None apart from undefined, so a
// JSON null prints as "" (Python prints "None", except through |string,
// which follows Python) and `x is defined` is false for it. Lists and
// dicts are immutable, as in Hugging Face's sandbox.
//
// [Template.RenderRequest] is what a server renders with: it first
// normalises the messages as OpenAI's API accepts them (developer and late
// or repeated system messages merged into the leading one when the
// template refuses them where they are; text parts flattened for templates
// that take only strings, detected from the source as vLLM does).
//
// # Inputs
//
// [Message], [ToolCall] and [Tool] decode from OpenAI-shaped JSON. Tool
// definitions and call arguments are kept as raw JSON so that the template
// sees their keys in the original order. Arguments sent as a JSON string
// (as OpenAI clients do) are decoded into an object before rendering, as
// Qwen3.5 and later templates iterate them with `|items`.
//
// # Limits
//
// Templates come from downloaded model folders and are untrusted. A render
// is bounded in steps, call depth, time, string size and output size (see
// [MaxSteps] and the constants beside it); crossing a bound gives an error
// wrapping [ErrLimit], never a crash or an unbounded wait.
package chattemplate
