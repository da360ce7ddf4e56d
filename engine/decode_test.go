package engine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"petal/engine/sample"
)

// chain is a sequence whose next token after id is (id*7+3) mod vocab, as
// one-hot logits, recording the runs Forward was given.
type chain struct {
	vocab int
	n     int
	runs  [][]int
}

func (c *chain) Forward(tokens []int, out []float32) error {
	c.runs = append(c.runs, slices.Clone(tokens))
	c.n += len(tokens)
	if len(out) > 0 {
		clear(out)
		out[0] = 0.5 // the runner-up
		out[c.next(tokens[len(tokens)-1])] = 1
	}
	return nil
}
func (c *chain) Len() int                    { return c.n }
func (c *chain) Fork() (Sequence, error)     { return nil, errors.New("no forks") }
func (c *chain) Bytes() int64                { return 0 }
func (c *chain) Close() error                { return nil }
func (c *chain) next(id int) int             { return (id*7 + 3) % c.vocab }
func (c *chain) Next([]float32) (int, error) { return 1, nil }

func collect(out *[]int, stopAt int) func(int) (bool, error) {
	return func(id int) (bool, error) {
		*out = append(*out, id)
		return len(*out) == stopAt, nil
	}
}

func TestRunHostLoop(t *testing.T) {
	const vocab = 50
	prompt := make([]int, 2*PrefillPiece+5)
	for i := range prompt {
		prompt[i] = i % vocab
	}
	c := &chain{vocab: vocab}
	var got []int
	first, split := 7, PrefillPiece+9
	var atSplit []int
	st, err := Run(t.Context(), c, vocab, &Decode{
		// 0 and len(prompt) are not inside the prompt: no snapshot there.
		Prompt: prompt, MaxTokens: 4, Splits: []int{0, first, split, len(prompt)},
		AtSplit: func(n int, s Sequence) {
			if n != s.Len() {
				t.Errorf("AtSplit(%d) with a sequence of %d tokens", n, s.Len())
			}
			atSplit = append(atSplit, n)
		},
		Token: collect(&got, -1),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{c.next(prompt[len(prompt)-1])}
	for len(want) < 4 {
		want = append(want, c.next(want[len(want)-1]))
	}
	if !slices.Equal(got, want) || st.Tokens != 4 {
		t.Errorf("tokens %v (%d counted), want %v", got, st.Tokens, want)
	}
	var lens []int
	for _, r := range c.runs {
		lens = append(lens, len(r))
	}
	// Pieces of PrefillPiece, cut at the splits, where a stretch of 514
	// tokens goes as 510 and MinPiece rather than leave 2 (split-first is
	// PrefillPiece+2); the last piece gives the first token's logits; the
	// last token is never fed.
	if split-first != PrefillPiece+2 {
		t.Fatal("the stretch between the splits changed")
	}
	if w := []int{first, split - first - MinPiece, MinPiece, len(prompt) - split, 1, 1, 1}; !slices.Equal(lens, w) {
		t.Errorf("Forward runs of %v tokens, want %v", lens, w)
	}
	if !slices.Equal(atSplit, []int{first, split}) {
		t.Errorf("AtSplit saw %v, want %v", atSplit, []int{first, split})
	}

	// A stop ends it after that token, with the token never fed; a limit
	// keeps picks below it; a Picker picks instead of the argmax.
	c, got = &chain{vocab: vocab}, nil
	if _, err := Run(t.Context(), c, vocab, &Decode{Prompt: []int{4}, MaxTokens: 9, Token: collect(&got, 2)}); err != nil {
		t.Fatal(err)
	}
	if w := []int{c.next(4), c.next(c.next(4))}; !slices.Equal(got, w) || c.Len() != 2 {
		t.Errorf("stop after 2: %v holding %d, want %v holding 2", got, c.Len(), w)
	}
	c, got = &chain{vocab: vocab}, nil
	if c.next(28) != vocab-1 {
		t.Fatal("28 no longer leads to the last id")
	}
	if _, err := Run(t.Context(), c, vocab, &Decode{Prompt: []int{28}, MaxTokens: 1, Limit: vocab - 1, Token: collect(&got, -1)}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int{0}) {
		t.Errorf("limit %d: picked %v, want the runner-up [0]", vocab-1, got)
	}
	c, got = &chain{vocab: vocab}, nil
	if _, err := Run(t.Context(), c, vocab, &Decode{Prompt: []int{4}, MaxTokens: 2, Picker: c, Token: collect(&got, -1)}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int{1, 1}) {
		t.Errorf("picker's tokens: %v", got)
	}
}

func TestRunStops(t *testing.T) {
	const vocab = 10
	c := &chain{vocab: vocab}
	ctx, cancel := context.WithCancelCause(t.Context())
	gone := errors.New("client left")
	var got []int
	_, err := Run(ctx, c, vocab, &Decode{Prompt: []int{1}, MaxTokens: 100, Token: func(id int) (bool, error) {
		got = append(got, id)
		if len(got) == 3 {
			cancel(gone)
		}
		return false, nil
	}})
	if !errors.Is(err, gone) || len(got) != 3 {
		t.Errorf("cancelled after 3 tokens: %v, %v", got, err)
	}
	boom := errors.New("emit failed")
	_, err = Run(t.Context(), &chain{vocab: vocab}, vocab, &Decode{Prompt: []int{1}, MaxTokens: 5, Token: func(int) (bool, error) { return false, boom }})
	if !errors.Is(err, boom) {
		t.Errorf("Token's error: got %v", err)
	}
	for _, d := range []Decode{
		{MaxTokens: 1, Token: collect(&got, -1)},
		{Prompt: []int{1}, Token: collect(&got, -1)},
		{Prompt: []int{1}, MaxTokens: 1},
		{Prompt: []int{vocab}, MaxTokens: 1, Token: collect(&got, -1)},
		{Prompt: []int{1}, MaxTokens: 1, Limit: vocab + 1, Token: collect(&got, -1)},
		{Prompt: []int{1}, MaxTokens: 1, Sampling: &Sampling{}, Picker: c, Token: collect(&got, -1)}, // no seed
		{Prompt: []int{1}, MaxTokens: 1, Sampling: &Sampling{Params: sample.Params{Seed: new(uint64)}}, Token: collect(&got, -1)},
	} {
		c := &chain{vocab: vocab}
		if _, err := Run(t.Context(), c, vocab, &d); err == nil || c.Len() != 0 {
			t.Errorf("%+v: err %v after %d tokens fed", d, err, c.Len())
		}
	}
}
