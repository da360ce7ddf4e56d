package service

import (
	"context"
	"fmt"
	"time"

	"petal/engine"
	"petal/engine/reply"
	"petal/engine/sample"
)

// FinishReason says why a reply ended, in the OpenAI API's words.
type FinishReason string

// The reasons a reply ends.
const (
	FinishStop      FinishReason = "stop"       // an end-of-sequence token or a stop string
	FinishLength    FinishReason = "length"     // max_tokens or the end of the context
	FinishToolCalls FinishReason = "tool_calls" // the reply ended after calling tools
)

// Summary is what a finished generation reports.
type Summary struct {
	Finish           FinishReason
	PromptTokens     int
	CompletionTokens int
	// CachedTokens is how many prompt tokens came from the prefix cache.
	CachedTokens int
	// Seed is the seed the draws came from, the request's or a random one.
	Seed uint64
	// StopSequence is the stop string that ended the reply; "" when
	// something else did.
	StopSequence string
}

// Emit receives the events of a reply as they are decided. An error from
// it stops the generation and is returned by Generate.
type Emit func(reply.Event) error

// Generate runs req on the model once the queue lets it, sending the reply
// to emit as it is generated: Begin followed by Run.
func (s *Service) Generate(ctx context.Context, req *Request, emit Emit) (Summary, error) {
	g, err := s.Begin(ctx, req)
	if err != nil {
		return Summary{}, err
	}
	defer g.Close()
	return g.Run(ctx, emit)
}

// Generation is a request that was checked and holds a place in the queue.
type Generation struct {
	s      *Service
	p      *prepared
	ticket *ticket
	start  time.Time
}

// Begin checks req (rendering and tokenizing it) and takes a place in the
// queue without waiting, so that a caller can answer bad input (an error
// marked ErrBadRequest) or a full queue (ErrQueueFull) before it commits to
// a response. The Generation must be closed.
func (s *Service) Begin(ctx context.Context, req *Request) (*Generation, error) {
	start := time.Now()
	p, err := s.prepare(ctx, req)
	if err != nil {
		s.stats.failed.Add(1)
		return nil, err
	}
	t, err := s.queue.join(req.Client)
	if err != nil {
		s.stats.rejected.Add(1)
		return nil, err
	}
	return &Generation{s: s, p: p, ticket: t, start: start}, nil
}

// PromptTokens is the length of the tokenized prompt.
func (g *Generation) PromptTokens() int { return len(g.p.tokens) }

// CachedTokens is how many prompt tokens came from the prefix cache, known
// once Run has sent its first event (0 before); for the stream that must
// say it before the reply, as Anthropic's message_start does.
func (g *Generation) CachedTokens() int { return g.p.cached }

// Run waits for the engine and generates the reply, sending it to emit. It
// returns when the reply is complete, when ctx ends (at the next token, with
// ctx's cause), when emit fails (with its error), or on an engine error.
func (g *Generation) Run(ctx context.Context, emit Emit) (Summary, error) {
	s := g.s
	if err := g.ticket.wait(ctx); err != nil {
		g.Close()
		return Summary{}, err
	}
	sum, err := s.run(ctx, g.p, emit, g.start)
	if err != nil {
		s.stats.failed.Add(1)
	} else {
		s.stats.completed.Add(1)
	}
	g.Close()
	return sum, err
}

// Close frees the generation's place in the queue or the engine; it may be
// called more than once.
func (g *Generation) Close() { g.ticket.leave() }

// run is one generation on the engine, which the caller holds.
func (s *Service) run(ctx context.Context, p *prepared, emit Emit, start time.Time) (Summary, error) {
	sum := Summary{PromptTokens: len(p.tokens)}
	seq, cached, logits, err := s.prefill(ctx, p.tokens)
	if err != nil {
		return sum, err
	}
	sum.CachedTokens = cached
	p.cached = cached
	s.stats.prompt.Add(int64(len(p.tokens)))
	s.stats.cached.Add(int64(cached))
	keep := false
	defer func() {
		if !keep {
			seq.Close()
		}
	}()

	sampler, err := sample.New(p.params, s.vocab, p.tokens)
	if err != nil {
		return sum, &badRequest{err}
	}
	sum.Seed = sampler.Seed()
	out := newSink(p.parser, emit)
	dec := s.tok.NewStreamDecoder(true)
	fed := append([]int(nil), p.tokens...)
	decodeStart := time.Now()
	con := s.constrain(p)
	for {
		if err := ctx.Err(); err != nil {
			return sum, context.Cause(ctx)
		}
		con.apply(logits)
		id, err := sampler.Next(logits)
		if err != nil {
			return sum, err
		}
		if err := con.advance(id, sampler.IsEOS(id)); err != nil {
			return sum, err
		}
		if sum.CompletionTokens == 0 {
			s.stats.observeTTFT(time.Since(start))
		}
		if sampler.IsEOS(id) {
			sum.Finish = FinishStop
			break
		}
		sum.CompletionTokens++
		text, stopped := p.stopper.Push(dec.Next(id))
		if err := out.feed(text); err != nil {
			return sum, err
		}
		if stopped {
			sum.Finish, sum.StopSequence = FinishStop, p.stopper.Matched()
			break
		}
		if sum.CompletionTokens == p.maxTokens {
			sum.Finish = FinishLength
			break
		}
		if err := seq.Forward([]int{id}, logits); err != nil {
			return sum, fmt.Errorf("service: decoding: %w", err)
		}
		fed = append(fed, id)
	}
	if !p.stopper.Stopped() {
		text, _ := p.stopper.Push(dec.Flush())
		if err := out.feed(text + p.stopper.Flush()); err != nil {
			return sum, err
		}
	}
	if err := out.close(); err != nil {
		return sum, err
	}
	if out.calls > 0 && sum.Finish == FinishStop {
		sum.Finish = FinishToolCalls
	}
	s.stats.observeDecode(sum.CompletionTokens, time.Since(decodeStart))
	keep = s.cache.put(fed, seq)
	return sum, nil
}

// prefill runs the prompt through a sequence, starting from the longest
// cached prefix, and returns it with the logits of the last prompt token
// and the number of tokens that came from the cache. On the way it leaves
// a snapshot in the cache where the next turn of the conversation will
// branch off.
func (s *Service) prefill(ctx context.Context, tokens []int) (engine.Sequence, int, []float32, error) {
	// At least the last token must run, for its logits.
	seq, cached, err := s.cache.get(tokens[:len(tokens)-1])
	if err != nil {
		return nil, 0, nil, err
	}
	if seq == nil {
		if seq, err = s.model.NewSequence(); err != nil {
			return nil, 0, nil, err
		}
	}
	boundary := s.snapshotPoint(tokens)
	logits := make([]float32, s.vocab.Size)
	for pos := cached; pos < len(tokens); {
		if ctx.Err() != nil {
			seq.Close()
			return nil, 0, nil, context.Cause(ctx)
		}
		end := min(pos+PrefillChunk, len(tokens))
		if boundary > pos && boundary < end {
			end = boundary
		}
		var out []float32
		if end == len(tokens) {
			out = logits
		}
		if err := seq.Forward(tokens[pos:end], out); err != nil {
			seq.Close()
			return nil, 0, nil, fmt.Errorf("service: prefill: %w", err)
		}
		pos = end
		if pos == boundary {
			s.snapshot(tokens[:pos], seq)
		}
	}
	return seq, cached, logits, nil
}

// snapshotPoint is where the next request of the same conversation will
// most likely differ: the start of the last turn (the assistant's opener
// that a following turn renders differently), or -1.
func (s *Service) snapshotPoint(tokens []int) int {
	if s.turnStart < 0 {
		return -1
	}
	for i := len(tokens) - 1; i > 0; i-- {
		if tokens[i] == s.turnStart {
			return i
		}
	}
	return -1
}

// snapshot caches a copy of seq as the state after tokens.
func (s *Service) snapshot(tokens []int, seq engine.Sequence) {
	if !s.cache.enabled() || s.cache.has(tokens) {
		return
	}
	f, err := seq.Fork()
	if err != nil {
		return // the cache is an optimisation; the generation goes on
	}
	if !s.cache.put(tokens, f) {
		f.Close()
	}
}

// sink turns decoded text into events: through the reply parser for a chat,
// as content for a raw prompt.
type sink struct {
	parser *reply.Parser
	emit   Emit
	calls  int
}

func newSink(parser *reply.Parser, emit Emit) *sink {
	return &sink{parser: parser, emit: emit}
}

func (k *sink) feed(text string) error {
	if text == "" {
		return nil
	}
	if k.parser == nil {
		return k.emit(reply.Event{Kind: reply.KindContent, Text: text})
	}
	return k.send(k.parser.Feed(text))
}

func (k *sink) close() error {
	if k.parser == nil {
		return nil
	}
	return k.send(k.parser.Close())
}

func (k *sink) send(events []reply.Event) error {
	for _, e := range events {
		if e.Kind == reply.KindToolStart {
			k.calls++
		}
		if err := k.emit(e); err != nil {
			return err
		}
	}
	return nil
}
