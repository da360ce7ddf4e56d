package engine

import (
	"errors"
	"slices"
	"testing"

	"petal/engine/checkpoint"
)

// chainModel is a Model without Step, whose sequences are chains.
type chainModel struct{ vocab int }

func (m chainModel) Config() *checkpoint.Config     { return &checkpoint.Config{Vocab: m.vocab} }
func (m chainModel) NewSequence() (Sequence, error) { return &chain{vocab: m.vocab}, nil }
func (m chainModel) Close() error                   { return nil }

func TestStepFallsBackToForward(t *testing.T) {
	const vocab = 20
	m := chainModel{vocab}
	a, b := &chain{vocab: vocab}, &chain{vocab: vocab}
	outA, outB := make([]float32, vocab), make([]float32, 3*vocab)
	if err := Step(m, []Row{{Seq: a, Tokens: []int{4}, Out: outA}, {Seq: b, Tokens: []int{1, 2, 3}, Out: outB[2*vocab:]}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.runs[0], []int{4}) || !slices.Equal(b.runs[0], []int{1, 2, 3}) {
		t.Fatalf("runs %v and %v, want [4] and [1 2 3]", a.runs, b.runs)
	}
	if got := Argmax(outA); got != a.next(4) {
		t.Errorf("row 0 argmax %d, want %d", got, a.next(4))
	}
	if got := Argmax(outB[2*vocab:]); got != b.next(3) {
		t.Errorf("row 1 argmax %d, want %d", got, b.next(3))
	}
}

func TestStepRefusesBadRows(t *testing.T) {
	const vocab = 20
	m := chainModel{vocab}
	a := &chain{vocab: vocab}
	for name, rows := range map[string][]Row{
		"none":        nil,
		"no tokens":   {{Seq: a}},
		"repeated":    {{Seq: a, Tokens: []int{1}}, {Seq: a, Tokens: []int{2}}},
		"bad token":   {{Seq: a, Tokens: []int{vocab}}},
		"bad out":     {{Seq: a, Tokens: []int{1, 2}, Out: make([]float32, vocab+1)}},
		"no sequence": {{Tokens: []int{1}}},
	} {
		err := Step(m, rows)
		if err == nil {
			t.Errorf("%s: no error", name)
		}
		if name != "bad token" && name != "bad out" && !errors.Is(err, ErrStepRows) {
			t.Errorf("%s: %v is not ErrStepRows", name, err)
		}
	}
	if len(a.runs) != 0 {
		t.Errorf("a refused step ran %v", a.runs)
	}
}
