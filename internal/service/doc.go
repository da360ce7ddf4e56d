// Package service is the generation service every client shares: the HTTP
// API and the terminal chat hand it requests, and it runs them one at a time
// on the model.
//
// # Pipeline
//
// A request goes through these steps, all in the caller's goroutine once it
// holds the engine:
//
//  1. render the checkpoint's chat template (or take a raw prompt),
//  2. tokenize, and refuse a prompt that does not fit the context,
//  3. find the longest cached prefix of the prompt ([prefixCache]),
//  4. run the engine's decode loop ([engine.Run]) on the rest: prefill in
//     pieces of [engine.PrefillPiece] with cancellation checks between
//     them, then pick tokens (on the device for a greedy request), detokenize
//     each incrementally, watch for stop strings and eos, and feed the text
//     to the reply parser, whose events (reasoning, content, tool calls) go
//     to the caller's emit function.
//
// Generate returns a [Summary] with the finish reason and usage.
//
// # Queue
//
// One model runs one generation at a time. Requests wait in a single
// queue of at most Options.QueueLimit, where clients (Request.Client) take
// turns and each client's requests keep their order; a request arriving at
// a full queue fails at once with [ErrQueueFull] (the API answers 429). A request whose
// context ends leaves the queue, or stops at the next token boundary if it
// is running, so a client that disconnects frees the engine at once.
//
// # Prefix cache
//
// Chats and agents resend their whole history every turn. A DeltaNet state
// cannot be rewound, so the cache keeps forks of sequences at boundaries
// that the next request is likely to share: the end of the first message
// (an agent's system prompt, the same at the head of each new conversation),
// the end of the conversation before the assistant's turn opener, and the
// end of each generation. The
// cache is bounded in bytes and evicts the least recently used entry.
package service
