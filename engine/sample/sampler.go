package sample

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Vocab describes the logits a Sampler is given.
type Vocab struct {
	// Size is the number of logits per row (the model's vocab_size).
	Size int
	// TokenizerSize is how many ids the tokenizer can produce; ids from it
	// up to Size are never sampled. 0 means Size.
	TokenizerSize int
	// EOS are the ids that end generation.
	EOS []int
}

// GreedyBelow is the temperature under which sampling is greedy, as in
// vLLM: 1/T would overflow the weights long before T reaches 0.
const GreedyBelow = 1e-5

// MaxTopLogprobs is the most alternatives [Sampler.NextLogprobs] reports,
// as the OpenAI API allows.
const MaxTopLogprobs = 20

// Sampler picks tokens for one generation. It is not safe for concurrent
// use.
type Sampler struct {
	p     Params
	vocab Vocab
	n     int // ids that may be sampled: [0, n)
	seed  uint64
	drawn uint32 // tokens recorded so far: the counter of the next draw

	// Penalty state, allocated only when a penalty is on.
	counts   []int32 // generated occurrences per id
	inPrompt []bool  // id occurs in the prompt
	touched  []int32 // ids with counts > 0 or inPrompt, each once

	eos  map[int]bool
	bias LogitBias

	// Scratch reused across calls.
	cands   []cand
	weights []float64
	kept    []keptToken // the drawn-from tokens in id order
	dense   []float64   // or their weights by id, for a large nucleus
	mass    []float64   // nucleus histogram: weight per bucket
	fill    []int       // nucleus histogram: tokens per bucket, then offsets
	starts  []int       // nucleus histogram: where each bucket's tokens begin
}

// cand is a token still in the running.
type cand struct {
	id    int32
	logit float32
}

// keptToken is a token the draw may pick, with its unnormalised weight.
type keptToken struct {
	id int32
	w  float64
}

// New returns a sampler for one generation with the given parameters over
// vocab; prompt holds the prompt's ids, which the repetition penalty counts.
func New(p Params, vocab Vocab, prompt []int) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if vocab.Size <= 0 {
		return nil, fmt.Errorf("sample: vocab size %d must be positive", vocab.Size)
	}
	n := vocab.TokenizerSize
	if n == 0 {
		n = vocab.Size
	}
	if n < 0 || n > vocab.Size {
		return nil, fmt.Errorf("sample: tokenizer size %d must be in [1, vocab size %d]", n, vocab.Size)
	}
	s := &Sampler{p: p, vocab: vocab, n: n, eos: map[int]bool{}}
	for _, id := range vocab.EOS {
		if id < 0 || id >= vocab.Size {
			return nil, fmt.Errorf("sample: eos id %d outside the vocabulary [0, %d)", id, vocab.Size)
		}
		s.eos[id] = true
	}
	if p.Seed != nil {
		s.seed = *p.Seed
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		s.seed = binary.LittleEndian.Uint64(b[:])
	}
	if s.penalized() {
		s.counts = make([]int32, vocab.Size)
		if p.RepetitionPenalty != 1 {
			s.inPrompt = make([]bool, vocab.Size)
			for _, id := range prompt {
				if id < 0 || id >= vocab.Size {
					return nil, fmt.Errorf("sample: prompt id %d outside the vocabulary [0, %d)", id, vocab.Size)
				}
				if !s.inPrompt[id] {
					s.inPrompt[id] = true
					s.touched = append(s.touched, int32(id))
				}
			}
		}
	}
	return s, nil
}

// SetLogitBias makes every later pick add b to the logits first.
func (s *Sampler) SetLogitBias(b LogitBias) error {
	if err := b.Validate(s.vocab); err != nil {
		return err
	}
	s.bias = b
	return nil
}

// Seed returns the seed the draws come from, the request's or a random one.
func (s *Sampler) Seed() uint64 { return s.seed }

// IsEOS reports whether id ends generation.
func (s *Sampler) IsEOS(id int) bool { return s.eos[id] }

func (s *Sampler) penalized() bool {
	return s.p.RepetitionPenalty != 1 || s.p.PresencePenalty != 0 || s.p.FrequencyPenalty != 0
}

// Next picks the next token from one row of logits and records it as
// generated. It overwrites the logits of penalised ids with their penalised
// values.
func (s *Sampler) Next(logits []float32) (int, error) {
	id, err := s.pick(logits)
	if err != nil {
		return 0, err
	}
	s.Accept(id)
	return id, nil
}

// NextLogprobs is Next that also reports the picked token's log probability
// and the top most likely tokens (at most [MaxTopLogprobs]): the
// log-softmax, over the ids the tokenizer produces, of the logits after the
// penalties and before temperature and the filters, so that it says what
// the model (and the request's penalties) think of each token, whatever the
// draw settings.
func (s *Sampler) NextLogprobs(logits []float32, top int) (int, Logprobs, error) {
	if top < 0 || top > MaxTopLogprobs {
		return 0, Logprobs{}, invalid("top_logprobs %d must be in [0, %d]", top, MaxTopLogprobs)
	}
	id, err := s.pick(logits)
	if err != nil {
		return 0, Logprobs{}, err
	}
	lp := s.logprobs(logits[:s.n], id, top)
	s.Accept(id)
	return id, lp, nil
}

// Logprobs is what [Sampler.NextLogprobs] reports of one step.
type Logprobs struct {
	Logprob float64
	// Top holds the most likely tokens, best first, the lower id first on
	// ties.
	Top []TokenLogprob
}

// TokenLogprob is one token's log probability.
type TokenLogprob struct {
	ID      int
	Logprob float64
}

// logprobs computes id's and the top best tokens' log-softmax over row,
// whose values are already penalised, in float64.
func (s *Sampler) logprobs(row []float32, id, top int) Logprobs {
	m := math.Inf(-1)
	for _, l := range row {
		m = max(m, float64(l))
	}
	var z float64
	for _, l := range row {
		z += math.Exp(float64(l) - m)
	}
	lse := m + math.Log(z)
	lp := Logprobs{Logprob: float64(row[id]) - lse}
	if top > 0 {
		for _, c := range s.topK(row, top) {
			if math.IsInf(float64(c.logit), -1) {
				break // masked (a grammar's): not an alternative, as on the GPU
			}
			lp.Top = append(lp.Top, TokenLogprob{int(c.id), float64(c.logit) - lse})
		}
	}
	return lp
}

// Accept records id as generated without sampling it (a token forced by the
// caller), so that penalties count it; it also moves the draws on.
func (s *Sampler) Accept(id int) {
	s.drawn++
	if s.counts == nil || id < 0 || id >= len(s.counts) {
		return
	}
	if s.counts[id] == 0 && (s.inPrompt == nil || !s.inPrompt[id]) {
		s.touched = append(s.touched, int32(id))
	}
	s.counts[id]++
}

// penalize applies the repetition, presence and frequency penalties in
// place.
func (s *Sampler) penalize(logits []float32) {
	rep := float32(s.p.RepetitionPenalty)
	for _, id := range s.touched {
		l := logits[id]
		if rep != 1 {
			if l > 0 {
				l /= rep
			} else {
				l *= rep
			}
		}
		if c := s.counts[id]; c > 0 {
			l -= float32(s.p.PresencePenalty + s.p.FrequencyPenalty*float64(c))
		}
		logits[id] = l
	}
}

// pick chooses a token without recording it.
func (s *Sampler) pick(logits []float32) (int, error) {
	kept, dense, err := s.candidates(logits)
	if err != nil {
		return 0, err
	}
	if dense != nil {
		var total float64
		for _, x := range dense {
			total += x
		}
		u := float64(Draw(s.seed, s.drawn)>>11) * 0x1p-53 * total
		last := 0
		for i, x := range dense {
			if x == 0 {
				continue
			}
			last = i
			if u < x {
				break
			}
			u -= x
		}
		return last, nil
	}
	if len(kept) == 1 {
		return int(kept[0].id), nil
	}
	var total float64
	for _, k := range kept {
		total += k.w
	}
	u := float64(Draw(s.seed, s.drawn)>>11) * 0x1p-53 * total
	for _, k := range kept {
		if u < k.w {
			return int(k.id), nil
		}
		u -= k.w
	}
	return int(kept[len(kept)-1].id), nil
}

// Probabilities returns the distribution the next [Sampler.Next] draws
// from, one probability per id of the vocabulary (a single 1 when greedy),
// without recording anything. Like Next, it overwrites the logits of
// penalised ids.
func (s *Sampler) Probabilities(logits []float32) ([]float64, error) {
	kept, dense, err := s.candidates(logits)
	if err != nil {
		return nil, err
	}
	for i, x := range dense {
		kept = append(kept, keptToken{int32(i), x})
	}
	var total float64
	for _, k := range kept {
		total += k.w
	}
	out := make([]float64, s.vocab.Size)
	for _, k := range kept {
		out[k.id] = k.w / total
	}
	return out, nil
}

// candidates penalises logits in place and returns the tokens a draw picks
// from, in id order, with their unnormalised weights: when no filter
// applies, dense holds one weight per id of the row; otherwise kept holds
// the tokens left (none of weight 0), the best token alone when greedy.
func (s *Sampler) candidates(logits []float32) (kept []keptToken, dense []float64, err error) {
	if len(logits) != s.vocab.Size {
		return nil, nil, fmt.Errorf("sample: %d logits, want vocab size %d", len(logits), s.vocab.Size)
	}
	for id, b := range s.bias {
		logits[id] += float32(b)
	}
	if s.penalized() {
		s.penalize(logits)
	}
	row := logits[:s.n]
	best, err := argmax(row)
	if err != nil {
		return nil, nil, err
	}
	kept = s.kept[:0]
	if s.p.Temperature < GreedyBelow || s.p.TopK == 1 {
		kept = append(kept, keptToken{int32(best), 1})
		s.kept = kept
		return kept, nil, nil
	}
	cs, w := s.distribution(row, best)
	if cs == nil {
		return nil, w, nil
	}
	if len(w)*denseAbove > len(row) {
		// A large nucleus: placing the weights by id beats sorting them.
		if cap(s.dense) < len(row) {
			s.dense = make([]float64, len(row))
		}
		dense = s.dense[:len(row)]
		clear(dense)
		for i, x := range w {
			dense[cs[i].id] = x
		}
		return nil, dense, nil
	}
	for i, x := range w {
		if x != 0 {
			kept = append(kept, keptToken{cs[i].id, x})
		}
	}
	slices.SortFunc(kept, func(a, b keptToken) int { return int(a.id) - int(b.id) })
	s.kept = kept
	return kept, nil, nil
}

// denseAbove: a nucleus of more than 1/denseAbove of the row is drawn from
// weights placed by id rather than sorted by id.
const denseAbove = 16

// ErrBadLogits marks a row of logits no token can be drawn from: the
// model's fault (its weights or its backend), not the request's.
var ErrBadLogits = errors.New("sample: the model produced logits no token can be drawn from")

// argmax returns the id of the largest logit, the lowest id on ties, and
// rejects rows that cannot be sampled from.
func argmax(row []float32) (int, error) {
	best := -1
	m := float32(math.Inf(-1))
	for i, l := range row {
		if l > m {
			best, m = i, l
		} else if l != l {
			return 0, fmt.Errorf("%w: logit of id %d is NaN", ErrBadLogits, i)
		}
	}
	switch {
	case best < 0:
		return 0, fmt.Errorf("sample: every logit is -Inf; no token can be picked")
	case math.IsInf(float64(m), 1):
		return 0, fmt.Errorf("%w: logit of id %d is +Inf", ErrBadLogits, best)
	}
	return best, nil
}

// distribution returns the tokens left after temperature, top-k, top-p and
// min-p, in descending order, with their unnormalised weights. When no
// filter applies it returns nil candidates and one weight per id of the row.
func (s *Sampler) distribution(row []float32, best int) ([]cand, []float64) {
	invT := 1 / s.p.Temperature
	top := float64(row[best])
	weight := func(l float32) float64 { return math.Exp((float64(l) - top) * invT) }
	// min-p keeps tokens whose probability is at least MinP times the best
	// one's, that is weight >= MinP, as the best token's weight is 1.
	minW := s.p.MinP

	var cs []cand
	var z float64 // the mass top-p is measured against
	switch {
	case s.p.TopK > 0:
		cs = s.topK(row, s.p.TopK)
		for _, c := range cs {
			z += weight(c.logit)
		}
	case s.p.TopP < 1:
		w := s.fullWeights(row, weight, 0)
		for _, x := range w {
			z += x
		}
		cs = s.nucleus(row, w, top, invT, z)
	default:
		return nil, s.fullWeights(row, weight, minW)
	}

	ws := s.weights[:0]
	var above float64
	target := s.p.TopP * z
	for i, c := range cs {
		if s.p.TopP < 1 && i > 0 && above >= target {
			break // top-p: the tokens above already hold mass p
		}
		x := weight(c.logit)
		if x < minW {
			break // min-p; candidates come in descending order
		}
		above += x
		ws = append(ws, x)
	}
	s.weights = ws
	return cs[:len(ws)], ws
}

// fullWeights computes every id's weight into scratch, zeroing those below
// minW.
func (s *Sampler) fullWeights(row []float32, weight func(float32) float64, minW float64) []float64 {
	if cap(s.weights) < len(row) {
		s.weights = make([]float64, len(row))
	}
	w := s.weights[:len(row)]
	for i, l := range row {
		x := weight(l)
		if x < minW {
			x = 0
		}
		w[i] = x
	}
	return w
}

// The nucleus (top-p without top-k) is found with a histogram of weights
// instead of a sort: buckets of 1/bucketsPerNat nat of log-weight below the
// best token, the last one taking everything further down.
const (
	nucleusBuckets = 4096
	bucketsPerNat  = 16
)

// bucket returns the histogram bucket of a logit, given the best logit top
// and 1/temperature.
func bucket(l float32, top, invT float64) int {
	b := (top - float64(l)) * invT * bucketsPerNat
	if b >= nucleusBuckets-1 {
		return nucleusBuckets - 1
	}
	return int(b)
}

// nucleus returns, in descending order, a set of tokens that holds the
// top-p nucleus: every token of the buckets above the one where the mass
// reaches TopP·z, and that bucket's tokens. w holds every id's weight. The
// tokens are placed by bucket (a counting sort) and only each bucket's
// share is sorted.
func (s *Sampler) nucleus(row []float32, w []float64, top, invT, z float64) []cand {
	if s.mass == nil {
		s.mass = make([]float64, nucleusBuckets)
		s.fill = make([]int, nucleusBuckets+1)
		s.starts = make([]int, nucleusBuckets)
	}
	clear(s.mass)
	clear(s.fill)
	for i, l := range row {
		if w[i] > 0 {
			b := bucket(l, top, invT)
			s.mass[b] += w[i]
			s.fill[b+1]++
		}
	}
	target := s.p.TopP * z
	cross := nucleusBuckets - 1
	var cum float64
	for b, m := range s.mass {
		if cum += m; cum >= target {
			cross = b
			break
		}
	}
	// fill[b] becomes the start of bucket b's segment.
	for b := 1; b <= cross+1; b++ {
		s.fill[b] += s.fill[b-1]
	}
	total := s.fill[cross+1]
	if cap(s.cands) < total {
		s.cands = make([]cand, total)
	}
	cs := s.cands[:total]
	next := s.fill[:cross+1]
	starts := s.starts[:cross+1]
	copy(starts, next)
	for i, l := range row {
		if w[i] == 0 {
			continue
		}
		if b := bucket(l, top, invT); b <= cross {
			cs[next[b]] = cand{int32(i), l}
			next[b]++
		}
	}
	for b, start := range starts {
		slices.SortFunc(cs[start:next[b]], cmpCand)
	}
	s.cands = cs
	return cs
}

// better orders candidates: higher logit first, lower id on ties.
func better(a, b cand) bool {
	return a.logit > b.logit || (a.logit == b.logit && a.id < b.id)
}

func cmpCand(a, b cand) int {
	switch {
	case better(a, b):
		return -1
	case better(b, a):
		return 1
	}
	return 0
}

// topK returns the k best candidates of row in descending order, keeping a
// min-heap of the best so far: one pass, O(n log k), no sort of the row.
func (s *Sampler) topK(row []float32, k int) []cand {
	k = min(k, len(row))
	h := s.cands[:0]
	for i, l := range row {
		if len(h) < k {
			h = append(h, cand{int32(i), l})
			siftUp(h, len(h)-1)
			continue
		}
		// Ids come in ascending order, so a logit equal to the worst
		// kept one loses the tie.
		if l > h[0].logit {
			h[0] = cand{int32(i), l}
			siftDown(h, 0)
		}
	}
	slices.SortFunc(h, cmpCand)
	s.cands = h
	return h
}

// The heap keeps the worst candidate at the root.
func siftUp(h []cand, i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !better(h[parent], h[i]) {
			return
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func siftDown(h []cand, i int) {
	for {
		worst := i
		l, r := 2*i+1, 2*i+2
		if l < len(h) && better(h[worst], h[l]) {
			worst = l
		}
		if r < len(h) && better(h[worst], h[r]) {
			worst = r
		}
		if worst == i {
			return
		}
		h[i], h[worst] = h[worst], h[i]
		i = worst
	}
}
