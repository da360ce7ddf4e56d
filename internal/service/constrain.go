package service

import (
	"context"
	"errors"
	"fmt"

	"petal/engine/grammar"
)

// constraint is a reply's grammar as the decode loop's engine.Constraint:
// the mask of what may come next, then the token that came.
type constraint struct {
	// ctx is the request's: a mask notices a client gone while it is
	// computed, not only between tokens. engine.Constraint's methods take
	// no context, so it is held here for the one generation.
	ctx   context.Context
	m     *grammar.Matcher
	s     *Service
	isEOS func(id int) bool
	eos   []int
	// waiting: the reply is still in its reasoning, until thinkEnd.
	waiting  bool
	thinkEnd int
	// forced: the grammar is a forced tool call's.
	forced bool
	// err is why the grammar could not give a mask; the reply then ends
	// at once and run returns err.
	err error
}

// constrain returns the constraint of p's grammar, or nil.
func (s *Service) constrain(ctx context.Context, p *prepared, isEOS func(int) bool) *constraint {
	if p.grammar == nil {
		return nil
	}
	v := s.grammarVocabulary()
	c := &constraint{ctx: ctx, m: p.grammar.Matcher(v), s: s, isEOS: isEOS, eos: s.vocab.EOS, thinkEnd: -1, forced: p.forced}
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
// the reply is still reasoning. When the grammar cannot give a mask (the
// request's context ended, the schema's readings or the mask's time
// passed their bounds, no token continues the reply), the mask holds the
// end-of-reply ids alone, so the reply stops without a token outside the
// grammar, and Err says why.
func (c *constraint) Allowed(mask []uint64) bool {
	if c.waiting {
		return false
	}
	if c.err == nil {
		c.err = c.m.Allowed(c.ctx, mask)
	}
	if c.err != nil {
		clear(mask)
		for _, id := range c.eos {
			if id >= 0 && id/64 < len(mask) {
				mask[id/64] |= 1 << (id % 64)
			}
		}
	}
	return true
}

// Advance follows the token drawn.
func (c *constraint) Advance(id int) error {
	if c.waiting {
		c.waiting = id != c.thinkEnd
		return nil
	}
	if c.err != nil {
		return c.Err()
	}
	b, _ := c.s.tok.Bytes(id)
	if err := c.m.Advance(b, c.isEOS(id)); err != nil {
		if errors.Is(err, grammar.ErrTooManyStates) {
			c.err = err
			return c.Err()
		}
		// The mask allowed only what the grammar takes; a draw outside
		// it is a sampler bug, not the client's.
		return fmt.Errorf("service: token %d drawn outside the grammar: %w", id, err)
	}
	return nil
}

// Err is why the grammar stopped the reply, nil if it did not. The
// schema's bounds are the client's to change (a 400 where the reply has
// not started); a context that ended keeps its cause.
func (c *constraint) Err() error {
	switch {
	case c == nil || c.err == nil:
		return nil
	case c.ctx.Err() != nil:
		return c.err
	case c.forced:
		return badRequestf("tool_choice: the tool's parameters cannot be followed: %v", c.err)
	}
	return badRequestf("response format: the schema cannot be followed: %v", c.err)
}

// forcedCall is the grammar of the call a request's tool_choice forces: of
// the tool it names, or of any of its tools. A forced call and a response
// format would each hold the whole reply, so they do not go together.
func forcedCall(req *Request) (*grammar.Grammar, error) {
	if req.Grammar != nil {
		return nil, badRequestf("tool_choice: a forced tool call cannot be combined with a structured output format")
	}
	var tools []grammar.Tool
	for _, t := range req.Tools {
		if req.ToolChoice.Name == "" || t.Function.Name == req.ToolChoice.Name {
			tools = append(tools, grammar.Tool{Name: t.Function.Name, Parameters: t.Function.Parameters})
		}
	}
	switch {
	case len(tools) == 0 && req.ToolChoice.Name != "":
		return nil, badRequestf("tool_choice: the tool %q is not among the tools", req.ToolChoice.Name)
	case len(tools) == 0:
		return nil, badRequestf("tool_choice: a call is required, but no tools are given")
	}
	g, err := grammar.ToolCall(tools)
	if err != nil {
		return nil, badRequestf("tool_choice: the call cannot be enforced: %v", err)
	}
	return g, nil
}
