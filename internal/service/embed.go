package service

import (
	"context"
	"math"

	"petal/engine"
)

// Bounds of one embeddings request: OpenAI's count of inputs, and a total
// of tokens that the CPU backend runs through the 35B model in minutes,
// not hours.
const (
	MaxEmbedInputs = 2048
	MaxEmbedTokens = 1 << 16
)

// EmbedRequest is the texts, or token ids, to embed.
type EmbedRequest struct {
	// Texts are tokenized; Tokens are taken as they are. One of them.
	Texts  []string
	Tokens [][]int
	// Truncate keeps an input's first tokens up to the context instead of
	// refusing it (Ollama's truncate).
	Truncate bool
	// Client is who asks, for the queue's turns.
	Client string
}

// Embeddings are the vectors, in the inputs' order, and the tokens read.
type Embeddings struct {
	Vectors [][]float32
	Tokens  int
}

// Embed pools each input's embedding from the model: the mean over its
// tokens of the final hidden states (after the final norm, as the LM head
// reads them), scaled to unit length, so that a dot product of two is
// their cosine similarity. Each input runs on a fresh sequence, without
// the chat template and without the prefix cache. It takes its turn in the
// queue as a generation does.
func (s *Service) Embed(ctx context.Context, req *EmbedRequest) (*Embeddings, error) {
	hm, ok := s.model.(engine.HiddenModel)
	if !ok {
		return nil, badRequestf("embeddings need the cpu backend: this server runs the model on a GPU backend, which reads back only logits (petal serve --backend cpu)")
	}
	inputs, total, err := s.embedInputs(req)
	if err != nil {
		return nil, err
	}
	t, err := s.queue.join(req.Client)
	if err != nil {
		s.stats.rejected.Add(1)
		return nil, err
	}
	defer t.leave()
	if err := t.wait(ctx); err != nil {
		return nil, err
	}
	h := s.model.Config().Hidden
	out := &Embeddings{Tokens: total}
	addUsage(ctx, Summary{PromptTokens: total})
	for _, ids := range inputs {
		seq, err := hm.NewHiddenSequence()
		if err != nil {
			return nil, err
		}
		states := make([]float32, len(ids)*h)
		// In pieces, so that a client gone stops the work.
		for start := 0; start < len(ids) && err == nil; start += engine.PrefillPiece {
			end := min(start+engine.PrefillPiece, len(ids))
			if err = context.Cause(ctx); err == nil {
				err = seq.Hidden(ids[start:end], states[start*h:end*h])
			}
		}
		seq.Close()
		if err != nil {
			return nil, err
		}
		out.Vectors = append(out.Vectors, meanUnit(states, len(ids), h))
	}
	return out, nil
}

// embedInputs tokenizes and checks the inputs, and counts their tokens.
func (s *Service) embedInputs(req *EmbedRequest) ([][]int, int, error) {
	n := len(req.Texts) + len(req.Tokens)
	switch {
	case n == 0:
		return nil, 0, badRequestf("input is empty: send a text or a list of them")
	case n > MaxEmbedInputs:
		return nil, 0, badRequestf("input holds %d items, at most %d", n, MaxEmbedInputs)
	}
	inputs := make([][]int, 0, n)
	total := 0
	add := func(i int, ids []int) error {
		if len(ids) == 0 {
			return badRequestf("input %d is empty", i)
		}
		if len(ids) > s.ctxLen {
			if !req.Truncate {
				return &ContextError{PromptTokens: len(ids), ContextLength: s.ctxLen}
			}
			ids = ids[:s.ctxLen]
		}
		if total += len(ids); total > MaxEmbedTokens {
			return badRequestf("the inputs hold more than %d tokens in all: send fewer at a time", MaxEmbedTokens)
		}
		inputs = append(inputs, ids)
		return nil
	}
	for i, text := range req.Texts {
		// No token is longer than maxTokenBytes: past this, the bound is
		// crossed without tokenizing.
		if len(text)/(normalizeShrink*s.maxTokenBytes) > MaxEmbedTokens {
			return nil, 0, badRequestf("the inputs hold more than %d tokens in all: send fewer at a time", MaxEmbedTokens)
		}
		if err := add(i, s.tok.Encode(text)); err != nil {
			return nil, 0, err
		}
	}
	for i, ids := range req.Tokens {
		for _, id := range ids {
			if !s.tok.Has(id) {
				return nil, 0, badRequestf("input %d holds %d, which is no token of this model", i, id)
			}
		}
		if err := add(i, ids); err != nil {
			return nil, 0, err
		}
	}
	return inputs, total, nil
}

// meanUnit is the mean of n rows of h floats, scaled to unit length (a
// zero mean stays zero).
func meanUnit(rows []float32, n, h int) []float32 {
	sum := make([]float64, h)
	for r := range n {
		for j, x := range rows[r*h : (r+1)*h] {
			sum[j] += float64(x)
		}
	}
	var norm float64
	for _, x := range sum {
		norm += x * x
	}
	v := make([]float32, h)
	if norm == 0 {
		return v
	}
	scale := 1 / math.Sqrt(norm)
	for j, x := range sum {
		v[j] = float32(x * scale)
	}
	return v
}

// EmbeddingSize is the length of the model's embeddings: its hidden size.
func (s *Service) EmbeddingSize() int { return s.model.Config().Hidden }
