// Package grammar constrains a reply to a JSON Schema, token by token: the
// structured outputs of response_format json_schema and json_object,
// Ollama's format and the Responses API's text.format; and, through
// [ToolCall], to one tool call in the chat template's markup when a client
// forces one (tool_choice), its arguments obeying the tool's schema.
//
// # Compiling
//
// [Compile] turns the subset of JSON Schema that clients send (zod through
// the openai SDK and the AI SDK, pydantic, LangChain) into a graph of
// nodes; a keyword outside it that changes what is valid (pattern, format,
// multipleOf, not, ...) is a [*SchemaError] naming it, never ignored.
//
// A schema is untrusted input, so Compile also makes the graph safe to
// match, or refuses it with a [*SchemaError] naming the JSON pointer:
//
//   - A $ref that comes back to itself through anyOf, oneOf, allOf or
//     $ref alone, before any value opens, is refused: matching it would
//     recurse without reading a byte. Recursion through a value (an
//     array's items, a property) is fine.
//   - Nested alternatives are merged into one list (at most
//     [MaxFlatAlternatives]), and nodes that say the same of the same
//     children become one node, so identical alternatives are one.
//   - Each node's need, the stack frames its smallest value takes, is
//     computed; a schema with no value (an integer between 0 and 1
//     exclusive, a required property of no value, an enum none of whose
//     values obeys the type beside it, a recursion that never ends), or
//     none within the matcher's stack, is refused. Where a value may be
//     left out, what has none is never offered.
//   - The schema's path is kept as a chain of segments, written out only
//     for an error, so compiling is linear in the schema's size.
//
// # Tool calls
//
// The Qwen3.5/3.6 template writes a call as markup, not JSON:
// <tool_call>, <function=NAME>, then each <parameter=P> with its value as
// raw text, closed in turn. [ToolCall] builds that form from fixed text,
// a choice among the offered names and raw text that may not hold a
// closing tag (engine/reply would end the value there); a parameter whose
// schema is not a string is a JSON value of that schema, compiled as
// above. Raw text is masked from tables by UTF-8 state too, and only
// tokens holding '<' or a newline are walked.
//
// # Matching
//
// A [Matcher] follows the reply as a set of stacks of open values (a set,
// because anyOf and enums leave several readings open), stepped byte by
// byte. Stacks are immutable lists that share their outer frames; equal
// stacks are kept once, by hash. [Matcher.Allowed] walks the [Vocab]'s
// trie of token bytes from the current stacks, so one step serves every
// token that shares a prefix, and a prefix that breaks the grammar cuts
// off all tokens under it. Inside a string, where most tokens go, the
// tokens that stay in the string are looked up in tables by the string's
// escape and UTF-8 state (ordered by the characters they add, for a
// maxLength), and only tokens holding a quote are walked. Whitespace
// between tokens is bounded ([MaxWhitespace]) and numbers have a length
// bound, so the reply keeps moving towards its end;
// a value opens only where its need fits, so every state can complete.
//
// # Limits
//
// The work of one mask is bounded, and so is that of a reply's masks
// together: past [MaxStates] distinct states, [MaxMaskTime] or the
// reply's [MaxReplyMaskTime], or when the request's context ends (looked
// at inside the walk, not only between tokens), Allowed returns an error
// ([ErrTooManyStates], [ErrMaskTime], the context's cause) and the reply
// ends with it; [ErrStuck] says no token of the vocabulary continues the
// reply, where an empty mask would leave the sampler nothing to draw.
package grammar
