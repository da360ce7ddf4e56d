package service

import (
	"fmt"
	"math"

	"petal/engine/grammar"
)

// constraint masks a reply's logits to its grammar before each draw. A
// nil constraint changes nothing.
type constraint struct {
	m    *grammar.Matcher
	s    *Service
	mask []uint64
	// waiting: the reply is still in its reasoning, until thinkEnd.
	waiting  bool
	thinkEnd int
}

// constrain returns the constraint of p's grammar, or nil.
func (s *Service) constrain(p *prepared) *constraint {
	if p.grammar == nil {
		return nil
	}
	v := s.grammarVocabulary()
	c := &constraint{m: p.grammar.Matcher(v), s: s, mask: make([]uint64, (v.Size()+63)/64), thinkEnd: -1}
	if id, ok := s.tok.TokenID("</think>"); ok && p.thinking {
		c.waiting, c.thinkEnd = true, id
	}
	return c
}

// grammarVocabulary arranges the tokenizer's tokens for masking, once.
func (s *Service) grammarVocabulary() *grammar.Vocab {
	s.grammarVocabOnce.Do(func() {
		s.grammarVocab = grammar.NewVocab(s.vocab.Size, func(id int) ([]byte, bool) {
			if id >= s.vocab.TokenizerSize || s.tok.IsSpecial(id) {
				return nil, false
			}
			return s.tok.Bytes(id)
		}, s.vocab.EOS)
	})
	return s.grammarVocab
}

// apply sets the logits of the tokens the grammar does not allow to -Inf.
func (c *constraint) apply(logits []float32) {
	if c == nil || c.waiting {
		return
	}
	c.m.Allowed(c.mask)
	inf := float32(math.Inf(-1))
	for i := range logits {
		if c.mask[i/64]&(1<<(i%64)) == 0 {
			logits[i] = inf
		}
	}
}

// advance follows the token drawn.
func (c *constraint) advance(id int, eos bool) error {
	switch {
	case c == nil:
		return nil
	case c.waiting:
		c.waiting = id != c.thinkEnd
		return nil
	}
	b, _ := c.s.tok.Bytes(id)
	if err := c.m.Advance(b, eos); err != nil {
		// The mask allowed only what the grammar takes; a draw outside
		// it is a sampler bug, not the client's.
		return fmt.Errorf("service: token %d drawn outside the grammar: %w", id, err)
	}
	return nil
}
