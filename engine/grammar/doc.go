// Package grammar constrains a reply to a JSON Schema, token by token: the
// structured outputs of response_format json_schema and json_object,
// Ollama's format and the Responses API's text.format.
//
// # Compiling
//
// [Compile] turns the subset of JSON Schema that clients send (zod through
// the openai SDK and the AI SDK, pydantic, LangChain) into a tree of nodes;
// a keyword outside it that changes what is valid (pattern, format,
// multipleOf, not, ...) is a [*SchemaError] naming it, never ignored.
//
// # Matching
//
// A [Matcher] follows the reply as a set of stacks of open values (a set,
// because anyOf and enums leave several readings open), stepped byte by
// byte. [Matcher.Allowed] walks the [Vocab]'s trie of token bytes from the
// current stacks, so one step serves every token that shares a prefix, and
// a prefix that breaks the grammar cuts off all tokens under it. Inside an
// unbounded string, where most tokens go, the tokens that stay in the
// string are looked up in tables by the string's escape and UTF-8 state,
// and only tokens holding a quote are walked. Whitespace between tokens is
// bounded ([MaxWhitespace]) and numbers have a length bound, so the reply
// keeps moving towards its end.
package grammar
