// Package api serves the generation service over HTTP: the OpenAI-compatible
// API that editors and agents use, Anthropic's Messages API that some agents
// speak, token counting, health and metrics, and the part of Ollama's API
// that some editors list models through.
//
// # Routes
//
// routes.go is the table of every route; each family has its own file
// (chat.go, completions.go, messages.go, models.go, tokenize.go, metrics.go,
// ollama.go). Handlers decode and check the request, hand it to the service,
// and render its events: as server-sent events for OpenAI streams, as named
// events (message_start, content_block_delta, ...) for Anthropic streams, as
// NDJSON for Ollama, or as one JSON body. Each request names its client by User-Agent,
// so that applications take turns in the service's queue.
//
// # Gate
//
// Every request passes one gate before dispatch (gate.go):
//   - the Host header must name this machine (loopback names, or the hosts
//     the server was told about), which defeats DNS rebinding;
//   - a request with an Origin header from another origin is refused unless
//     the origin is allowed; CORS headers go only to allowed origins;
//   - POST bodies must be application/json, which browsers cannot send
//     cross-origin without a preflight, and are bounded by MaxBodyBytes
//     and by BodyReadTimeout (a stalled body is a 408), and must hold one
//     JSON value and nothing after it; a body is read whole as it arrives
//     and then decoded, at most MaxDecoding at once;
//   - with an API key, every route but /health needs it as a Bearer token
//     (or in X-Api-Key, as Anthropic clients send it).
//
// # Errors
//
// Errors are written in one place (errors.go), in the OpenAI shape
// {"error": {"message", "type", "param", "code"}}: 400 for bad input, a
// prompt over the context included (naming both token counts), 401 for a
// bad key, 404 for unknown paths (JSON under /v1 and /api in any case,
// never the UI's page), 413 for an oversized body, 429 with Retry-After
// when the queue is full, on every route family. Bad input never gives a
// 500; a model whose logits cannot be sampled (NaN) is a 500 model_error
// that says so.
// Anthropic routes answer the same statuses in Anthropic's shape,
// {"type": "error", "error": {"type", "message"}}, and Ollama routes as
// {"error": message}.
package api
