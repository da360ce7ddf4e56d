package service

import (
	"fmt"

	"petal/engine/grammar"
)

// constraint is a reply's grammar as the decode loop's engine.Constraint:
// the mask of what may come next, then the token that came.
type constraint struct {
	m     *grammar.Matcher
	s     *Service
	isEOS func(id int) bool
	// waiting: the reply is still in its reasoning, until thinkEnd.
	waiting  bool
	thinkEnd int
}

// constrain returns the constraint of p's grammar, or nil.
func (s *Service) constrain(p *prepared, isEOS func(int) bool) *constraint {
	if p.grammar == nil {
		return nil
	}
	v := s.grammarVocabulary()
	c := &constraint{m: p.grammar.Matcher(v), s: s, isEOS: isEOS, thinkEnd: -1}
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

// Allowed sets the tokens the grammar allows next; none is masked while
// the reply is still reasoning.
func (c *constraint) Allowed(mask []uint64) bool {
	if c.waiting {
		return false
	}
	c.m.Allowed(mask)
	return true
}

// Advance follows the token drawn.
func (c *constraint) Advance(id int) error {
	if c.waiting {
		c.waiting = id != c.thinkEnd
		return nil
	}
	b, _ := c.s.tok.Bytes(id)
	if err := c.m.Advance(b, c.isEOS(id)); err != nil {
		// The mask allowed only what the grammar takes; a draw outside
		// it is a sampler bug, not the client's.
		return fmt.Errorf("service: token %d drawn outside the grammar: %w", id, err)
	}
	return nil
}
