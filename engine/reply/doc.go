// Package reply splits the text Qwen3.6 generates into reasoning, answer
// content and tool calls, token by token.
//
// # Format
//
// With thinking on, the prompt already ends in "<think>\n", so generation
// starts inside the reasoning, which runs up to "</think>"; the answer
// follows. With thinking off it starts in the answer. Tool calls are XML:
//
//	<tool_call>
//	<function=NAME>
//	<parameter=KEY>
//	VALUE
//	</parameter>
//	</function>
//	</tool_call>
//
// One newline after "<parameter=KEY>" and one before the value's end are
// part of the markup, not of the value (the chat template writes them, and
// Qwen's own parsers strip exactly one of each). Values are converted by the
// tool's JSON schema: integer, number, boolean, object, array and null
// values become JSON of that type when they parse as such, "null" or "None"
// becomes null for nullable and non-string parameters, and everything else,
// strings above all, is kept verbatim as a JSON string. Arguments come out
// as compact JSON objects with keys in the order the model wrote them.
//
// # Streaming
//
// A [Parser] is fed text deltas and returns [Event] values. The parse is the
// same however the text is split: a [Result] built from the events of any
// split equals [Parse] of the whole text. The parser holds back only text
// whose meaning the next bytes can still change: a possible tag prefix, the
// whitespace between a closing tag and the tag that confirms it, or a
// newline that may be the last of a value. String values stream as they are
// generated; other typed values are emitted whole once they end.
//
// # Recovery
//
// The model's output is not always well formed, and no text is dropped
// because of it: markup is removed, words are kept.
//   - A "</parameter>" is the real end of a value only when, after optional
//     whitespace, it is followed by another parameter of the tool, by
//     "</function>", "</tool_call>", "<tool_call>", "</think>" or the end of
//     the text; otherwise it is value text (code that mentions the tag).
//   - A missing "</parameter>" is recovered at a new line starting with a
//     parameter the call has not used yet, at "</function>" or
//     "</tool_call>" followed by the end of the call, or at the end of text;
//     a missing "</function>" or "</tool_call>" likewise.
//   - Text before, between or after calls is content; text inside a call
//     that belongs to no parameter goes to the surrounding channel.
//   - A call inside the reasoning is still a call; reasoning resumes after it.
//   - "<think>" in the answer opens reasoning again; a stray "</think>" or
//     "<think>" is dropped, so think tags never reach the content.
//   - Whitespace around "</think>" and around calls is trimmed however the
//     model spaces it: reasoning and content never start or end with
//     whitespace, and whitespace that sits between two pieces of the same
//     channel is kept.
//   - "<tool_call>" not followed by "<function=NAME>" (after whitespace) is
//     plain text, as is a call cut off before its name ends.
//   - Functions the tools do not name are still reported as calls (with all
//     values as strings); whether to run them is the caller's choice.
//
// A value that contains a literal "</parameter>" followed by a line that
// looks exactly like the call's next parameter, or "</function>" followed by
// "</tool_call>", is cut there: the format has no escaping, and deciding
// otherwise would need the whole rest of the text.
package reply
