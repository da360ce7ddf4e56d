package sample

import (
	"encoding/json"
	"errors"
	"testing"
)

// TestLogitBias: the bias is added before the draw, greedy or not, and
// counts in the logprobs reported; -100 keeps a token out, 100 makes it
// the pick.
func TestLogitBias(t *testing.T) {
	vocab := Vocab{Size: 4}
	for _, p := range []Params{{Temperature: 0, TopP: 1, RepetitionPenalty: 1}, {Temperature: 1, TopP: 1, RepetitionPenalty: 1}} {
		s, err := New(p, vocab, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetLogitBias(LogitBias{2: -100, 3: 100}); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			logits := []float32{1, 2, 9, 0}
			id, lp, err := s.NextLogprobs(logits, 1)
			if err != nil || id != 3 || len(lp.Top) != 1 || lp.Top[0].ID != 3 || lp.Logprob < -1e-6 {
				t.Fatalf("temperature %v: picked %d (%+v), %v; want 3", p.Temperature, id, lp, err)
			}
		}
	}
	s, _ := New(Params{TopP: 1, RepetitionPenalty: 1}, Vocab{Size: 8, TokenizerSize: 6}, nil)
	for _, bad := range []LogitBias{{6: 1}, {-1: 1}, {0: 100.5}, {0: -101}} {
		if err := s.SetLogitBias(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: %v, want ErrInvalid", bad, err)
		}
	}
	many := LogitBias{}
	for id := range MaxLogitBiasTokens + 1 {
		many[id] = 1
	}
	if err := many.Validate(Vocab{Size: 1000}); !errors.Is(err, ErrInvalid) {
		t.Errorf("%d tokens: %v", len(many), err)
	}
}

func TestLogitBiasJSON(t *testing.T) {
	var o Overrides
	if err := json.Unmarshal([]byte(`{"logit_bias":{"50256":-100,"7":2.5}}`), &o); err != nil || len(o.LogitBias) != 2 || o.LogitBias[50256] != -100 || o.LogitBias[7] != 2.5 {
		t.Errorf("%v %v", o.LogitBias, err)
	}
	var te *json.UnmarshalTypeError
	if err := json.Unmarshal([]byte(`{"logit_bias":{"x":1}}`), &o); !errors.As(err, &te) || te.Field != "logit_bias" {
		t.Errorf("a key that is no id: %v", err)
	}
	o = Overrides{}
	if err := json.Unmarshal([]byte(`{"logit_bias":null}`), &o); err != nil || o.LogitBias != nil {
		t.Errorf("null: %v %v", o.LogitBias, err)
	}
}
