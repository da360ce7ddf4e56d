package service

import (
	"context"
	"slices"
	"strings"
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
	// DiskCachedTokens is CachedTokens when the prefix cache's disk tier
	// restored them (0 when memory held them), in DiskLoad.
	DiskCachedTokens int
	DiskLoad         time.Duration
	// Seed is the seed the draws came from, the request's or a random one.
	Seed uint64
	// StopSequence is the stop string that ended the reply; "" when
	// something else did.
	StopSequence string
	// Logprobs holds, when the request asked, one entry per reply token
	// (the end-of-sequence token excluded), in order.
	Logprobs []TokenLogprob
	// Drafted counts the MTP head's drafts verified for the reply,
	// Accepted those that stood (engine.DecodeStats).
	Drafted, Accepted int
}

// TokenLogprob is one reply token's log probability and its most likely
// alternatives (best first).
type TokenLogprob struct {
	Token   Token
	Logprob float64
	Top     []TopLogprob
}

// TopLogprob is one alternative token and its log probability.
type TopLogprob struct {
	Token   Token
	Logprob float64
}

// Token is a token's text and its bytes (a piece of a UTF-8 character
// reads as U+FFFD in Text; Bytes holds it as is).
type Token struct {
	ID    int
	Text  string
	Bytes []byte
}

func (s *Service) token(id int) Token {
	b, _ := s.tok.Bytes(id)
	return Token{ID: id, Text: strings.ToValidUTF8(string(b), "\uFFFD"), Bytes: b}
}

func (s *Service) tokenLogprob(id int, lp sample.Logprobs) TokenLogprob {
	t := TokenLogprob{Token: s.token(id), Logprob: lp.Logprob, Top: make([]TopLogprob, len(lp.Top))}
	for i, c := range lp.Top {
		t.Top[i] = TopLogprob{Token: s.token(c.ID), Logprob: c.Logprob}
	}
	return t
}

// Emit receives the events of a reply as they are decided, from inside the
// decode loop, which holds the engine for every queued request: it must
// not wait for a client (a stream queues the event and cuts off a client
// too far behind). An error from it stops the generation and is returned
// by Generate.
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
	s.stats.observeQueueWait(g.ticket.granted.Sub(g.ticket.joined))
	sum, err := s.run(ctx, g.p, emit, g.start)
	addUsage(ctx, sum)
	if err != nil {
		s.stats.failed.Add(1)
	} else {
		s.stats.completed.Add(1)
	}
	g.Close()
	return sum, err
}

// TakeLogprobs returns the logprobs (when the request asked) of the reply
// tokens picked since its last call, each token's once and in order: from
// emit, those of the tokens up to the event's text (and of tokens whose
// text is still held back, a stop string's possible start); after Run,
// the rest. So a stream sends each chunk's tokens' logprobs with it, and
// all chunks' together are Summary.Logprobs.
func (g *Generation) TakeLogprobs() []TokenLogprob {
	lps := g.p.lps[g.p.taken:]
	g.p.taken = len(g.p.lps)
	return lps
}

// Close frees the generation's place in the queue or the engine; it may be
// called more than once.
func (g *Generation) Close() { g.ticket.leave() }

// run is one generation on the engine, which the caller holds.
func (s *Service) run(ctx context.Context, p *prepared, emit Emit, start time.Time) (Summary, error) {
	sum := Summary{PromptTokens: len(p.tokens)}
	sampler, err := sample.New(p.params, s.vocab, p.tokens)
	if err == nil {
		err = sampler.SetLogitBias(p.bias)
	}
	if err != nil {
		return sum, &badRequest{err}
	}
	sum.Seed = sampler.Seed()
	// At least the last prompt token must run, for its logits.
	var hit cacheHit
	var seq engine.Sequence
	key := cacheKey(p.tokens, p.images)
	s.onEngine(func() {
		hit, err = s.lookup(key[:len(key)-1])
		if hit.seq != nil && insideImage(hit.tokens, p.images) {
			// The rest of an image cannot be placed on a sequence that
			// holds its first tokens.
			hit.seq.Close()
			hit = cacheHit{}
		}
		if err == nil {
			if seq = hit.seq; seq == nil {
				seq, err = s.model.NewSequence()
			}
		}
	})
	// The images past the cached prefix are made (and encoded, where the
	// backend allows) now, off the engine, which other requests keep using
	// meanwhile; a client that leaves stops the work.
	if rest := imagesFrom(p.images, hit.tokens); err == nil && len(rest) > 0 {
		if err = loadImages(ctx, rest); err == nil {
			err = s.encodeImages(ctx, rest)
		}
		if err == nil {
			s.onEngine(func() { err = placeImagesIn(seq, rest) })
		}
	}
	if err != nil {
		if seq != nil {
			s.onEngine(func() { seq.Close() })
		}
		return sum, err
	}
	cached := hit.tokens
	if hit.disk {
		sum.DiskCachedTokens, sum.DiskLoad = cached, hit.diskTime
	}
	defer func() {
		if seq != nil {
			s.onEngine(func() { seq.Close() })
		}
	}()
	sum.CachedTokens = cached
	p.cached = cached
	out := newSink(p.parser, emit)
	dec := s.tok.NewStreamDecoder(true)
	picked := make([]int, 0, min(p.maxTokens, 1024))
	var decodeStart time.Time
	var last sample.Logprobs
	d := &engine.Decode{
		Prompt: p.tokens[cached:], MaxTokens: p.maxTokens, Limit: s.vocab.TokenizerSize,
		Token: func(id int) (bool, error) {
			if len(picked) == 0 {
				decodeStart = time.Now()
				s.stats.observeTTFT(decodeStart.Sub(start))
				s.stats.prompt.Add(int64(len(p.tokens)))
				s.stats.cached.Add(int64(cached))
			}
			picked = append(picked, id)
			if sampler.IsEOS(id) {
				sum.Finish = FinishStop
				return true, nil
			}
			sum.CompletionTokens++
			if p.logprobs {
				p.lps = append(p.lps, s.tokenLogprob(id, last))
				sum.Logprobs = p.lps
			}
			text, stopped := p.stopper.Push(dec.Next(id))
			if err := out.feed(text); err != nil {
				return true, err
			}
			if stopped {
				sum.Finish, sum.StopSequence = FinishStop, p.stopper.Matched()
				return true, nil
			}
			if sum.CompletionTokens == p.maxTokens {
				sum.Finish = FinishLength
				return true, nil
			}
			return false, nil
		},
	}
	if p.logprobs {
		// The logprobs come from the sampler, on the device too, greedy
		// or not.
		d.Logprobs, d.TopLogprobs = func(lp sample.Logprobs) { last = lp }, p.top
	}
	con := s.constrain(ctx, p, sampler.IsEOS)
	if con != nil {
		// The device's argmax takes no mask: the sampler draws, greedy
		// or not.
		d.Constraint = con
	}
	if con != nil || p.logprobs || !deviceGreedy(p.params) || len(p.bias) > 0 {
		params := p.params
		seed := sampler.Seed()
		params.Seed = &seed
		d.Picker, d.Sampling = sampler, &engine.Sampling{Params: params, Prompt: p.tokens, Bias: p.bias}
	}
	turns := s.snapshotPoints(p.tokens)
	for _, b := range s.withLongPromptPoints(turns, len(p.tokens)) {
		if b > cached {
			d.Splits = append(d.Splits, b-cached)
		}
	}
	d.AtSplit = func(n int, seq engine.Sequence) {
		if slices.Contains(turns, cached+n) {
			s.snapshot(key[:cached+n], seq)
		} else {
			s.disk.put(key[:cached+n], seq)
		}
	}
	d.Speculate, d.SpecMemory = s.speculate, s.specMemory
	var st engine.DecodeStats
	if s.step != nil {
		st, err = s.step.run(ctx, seq, d)
	} else {
		st, err = engine.Run(ctx, seq, s.vocab.Size, d)
	}
	s.stats.observeLoop(st)
	sum.Drafted, sum.Accepted = st.Drafted, st.Accepted
	if err == nil {
		err = con.Err() // the grammar ended the reply
	}
	if err != nil {
		return sum, err
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
	// The sequence holds the prompt and the picked tokens it was fed: all
	// of them, or all but the last.
	fed := slices.Concat(key, picked)[:seq.Len()]
	s.onEngine(func() {
		s.disk.put(fed, seq)
		if s.cache.put(fed, seq) {
			seq = nil
		}
	})
	return sum, nil
}

// onEngine runs f, which uses the model, where that is safe: at once
// when requests run one at a time (the caller holds the engine), else
// between two batched steps on the goroutine that runs them.
func (s *Service) onEngine(f func()) {
	if s.step == nil {
		f()
		return
	}
	s.step.do(f)
}

// deviceGreedy reports whether the most likely token is the whole pick, so
// the backend may choose it on its device without the logits: greedy and
// no penalty (which needs the counts of what was generated).
func deviceGreedy(p sample.Params) bool {
	greedy := p.Temperature < sample.GreedyBelow || p.TopK == 1
	return greedy && p.RepetitionPenalty == 1 && p.PresencePenalty == 0 && p.FrequencyPenalty == 0
}

// snapshotPoints are where later requests will most likely differ from
// this one, ascending: the end of the first message (the system prompt,
// which an agent sends unchanged at the head of every new conversation),
// and the start of the last turn (the assistant's opener, which the next
// turn of this conversation renders differently).
func (s *Service) snapshotPoints(tokens []int) []int {
	if s.turnStart < 0 {
		return nil
	}
	var points []int
	for i := 1; i < len(tokens); i++ {
		if tokens[i] == s.turnStart {
			points = append(points, i)
			break
		}
	}
	for i := len(tokens) - 1; i > 0; i-- {
		if tokens[i] == s.turnStart {
			if len(points) == 0 || points[0] != i {
				points = append(points, i)
			}
			break
		}
	}
	return points
}

// snapshot caches a copy of seq as the state after tokens, in memory and
// on disk.
func (s *Service) snapshot(tokens []int, seq engine.Sequence) {
	s.disk.put(tokens, seq)
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
