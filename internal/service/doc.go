// Package service is the generation service every client shares: the HTTP
// API and the terminal chat hand it requests, and it runs them on the
// model, one at a time or several together in batched steps.
//
// # Pipeline
//
// A request goes through these steps, in the caller's goroutine once it
// holds the engine (with Options.Parallel above 1, steps 3 and 4 run on the
// stepper, below):
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
// One model runs at most Options.Parallel generations at a time. Requests
// wait in a single queue of at most Options.QueueLimit, where clients (Request.Client) take
// turns and each client's requests keep their order; a request arriving at
// a full queue fails at once with [ErrQueueFull] (the API answers 429). A request whose
// context ends leaves the queue, or stops at the next token boundary if it
// is running, so a client that disconnects frees the engine at once.
//
// # Batched steps
//
// With Options.Parallel above 1 one goroutine, the stepper, owns the model
// while requests run: every step is one [engine.StepJobs] over all running
// generations, each reply's next token and pieces of new prompts. Pieces
// are sized from the measured time of a prompt token: a prompt read alone
// in pieces of about SoloTarget, beside other requests in steps of about
// StepTarget, so running replies keep flowing and a short request starts
// at the next step. The budget goes to the prompt with the fewest tokens
// left first, and on every other step in arrival order, so no prompt is
// starved. A reply running alone decodes on its backend's own loop (on a
// GPU, picked on the device with two steps in flight), which yields to the
// batched steps when another request arrives. Every other model call of a
// generation (the prefix cache's lookups and forks, its disk tier's loads,
// new sequences, closes) runs on the stepper between two steps, so a disk
// hit holds the running replies for as long as it reads. A panic in a
// request's functions ends that request alone. The stepper's goroutine
// exists only while there is work. Embeddings (CPU backend only) run on
// their request's goroutine beside it, taking a place in the queue.
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
