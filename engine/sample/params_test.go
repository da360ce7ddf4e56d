package sample

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

func valid() Params {
	return Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
}

func TestValidate(t *testing.T) {
	ok := []func(*Params){
		func(p *Params) {},
		func(p *Params) { p.Temperature = 0 },
		func(p *Params) { p.TopP = 1e-9 },
		func(p *Params) { p.TopK = 1 },
		func(p *Params) { p.MinP = 1 },
		func(p *Params) { p.PresencePenalty, p.FrequencyPenalty = -2, 2 },
		func(p *Params) { p.RepetitionPenalty = 0.5 },
	}
	for i, f := range ok {
		p := valid()
		f(&p)
		if err := p.Validate(); err != nil {
			t.Errorf("case %d %+v: %v", i, p, err)
		}
	}
	bad := []struct {
		set  func(*Params)
		name string
	}{
		{func(p *Params) { p.Temperature = -0.1 }, "temperature"},
		{func(p *Params) { p.Temperature = math.NaN() }, "temperature"},
		{func(p *Params) { p.Temperature = math.Inf(1) }, "temperature"},
		{func(p *Params) { p.TopK = -1 }, "top_k"},
		{func(p *Params) { p.TopP = 0 }, "top_p"},
		{func(p *Params) { p.TopP = 1.01 }, "top_p"},
		{func(p *Params) { p.MinP = -0.01 }, "min_p"},
		{func(p *Params) { p.MinP = 1.5 }, "min_p"},
		{func(p *Params) { p.PresencePenalty = 2.5 }, "presence_penalty"},
		{func(p *Params) { p.FrequencyPenalty = -3 }, "frequency_penalty"},
		{func(p *Params) { p.RepetitionPenalty = 0 }, "repetition_penalty"},
		{func(p *Params) { p.RepetitionPenalty = -1 }, "repetition_penalty"},
	}
	for _, c := range bad {
		p := valid()
		c.set(&p)
		err := p.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%+v: got %v, want an ErrInvalid naming %s", p, err, c.name)
		}
		if _, err := New(p, Vocab{Size: 4}, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v) accepted it: %v", p, err)
		}
	}
}

func TestReadGenerationConfig(t *testing.T) {
	data, err := os.ReadFile("testdata/generation_config.json")
	if err != nil {
		t.Fatal(err)
	}
	gc, err := ReadGenerationConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if *gc.Temperature != 1 || *gc.TopP != 0.95 || *gc.TopK != 20 || !*gc.DoSample || gc.MinP != nil || gc.RepetitionPenalty != nil {
		t.Fatalf("fields: %+v", gc)
	}
	if len(gc.EOS) != 2 || gc.EOS[0] != 248046 || gc.EOS[1] != 248044 {
		t.Fatalf("eos %v", gc.EOS)
	}
	one, err := ReadGenerationConfig([]byte(`{"eos_token_id": 7, "min_p": 0.05, "repetition_penalty": 1.1}`))
	if err != nil || len(one.EOS) != 1 || one.EOS[0] != 7 || *one.MinP != 0.05 || *one.RepetitionPenalty != 1.1 {
		t.Fatalf("scalar eos: %+v %v", one, err)
	}
	// Fields Petal does not read from the file, of types a request would be
	// refused for, must not stop the model loading.
	for _, odd := range []string{`{"temperature": 0.7, "seed": "random"}`, `{"temperature": 0.7, "seed": 1.5}`, `{"temperature": 0.7, "presence_penalty": "1.5"}`} {
		gc, err := ReadGenerationConfig([]byte(odd))
		if err != nil || gc.Temperature == nil || *gc.Temperature != 0.7 || gc.Seed != nil || gc.PresencePenalty != nil {
			t.Errorf("%s: got %+v, %v; want temperature 0.7 and nothing else", odd, gc, err)
		}
	}
	for _, bad := range []string{`{`, `{"eos_token_id": "x"}`, `{"eos_token_id": [-1]}`, `{"top_k": "many"}`} {
		if _, err := ReadGenerationConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), "generation_config.json") {
			t.Errorf("%s: got %v, want an error naming the file", bad, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	k := 40
	no := false
	gc := GenerationConfig{Overrides: Overrides{Temperature: f(0.8), TopP: f(0.9), TopK: &k, MinP: f(0.02)}}

	got := Defaults(gc, PresetThinking)
	want := Params{Temperature: 0.8, TopP: 0.9, TopK: 40, MinP: 0.02, PresencePenalty: 1.5, RepetitionPenalty: 1}
	if got != want {
		t.Errorf("thinking: got %+v, want %+v", got, want)
	}
	// The file is tuned for thinking; the other presets are the card's.
	if got := Defaults(gc, PresetNonThinking); got != PresetNonThinking.Card() {
		t.Errorf("non-thinking: got %+v, want %+v", got, PresetNonThinking.Card())
	}
	if got := Defaults(GenerationConfig{}, PresetThinking); got != PresetThinking.Card() {
		t.Errorf("empty file: got %+v, want the card %+v", got, PresetThinking.Card())
	}
	gc.DoSample = &no
	if got := Defaults(gc, PresetCoding); got.Temperature != 0 {
		t.Errorf("do_sample false: temperature %v, want 0 (greedy)", got.Temperature)
	}
	card := map[Preset]Params{
		PresetThinking:    {Temperature: 1, TopP: 0.95, TopK: 20, PresencePenalty: 1.5, RepetitionPenalty: 1},
		PresetCoding:      {Temperature: 0.6, TopP: 0.95, TopK: 20, RepetitionPenalty: 1},
		PresetNonThinking: {Temperature: 0.7, TopP: 0.8, TopK: 20, PresencePenalty: 1.5, RepetitionPenalty: 1},
	}
	for p, want := range card {
		if got := p.Card(); got != want || got.Validate() != nil {
			t.Errorf("preset %d: got %+v, want %+v (MODEL.md)", p, got, want)
		}
	}
}

// Overrides decode a request's fields as clients send them and replace
// only what they set.
func TestOverrides(t *testing.T) {
	var o Overrides
	if err := json.Unmarshal([]byte(`{"temperature":0.5,"top_k":3,"seed":-1,"min_p":null,"other":1}`), &o); err != nil {
		t.Fatal(err)
	}
	base := PresetCoding.Card()
	got := o.Apply(base)
	want := base
	want.Temperature, want.TopK = 0.5, 3
	if got.Seed == nil || *got.Seed != math.MaxUint64 {
		t.Fatalf("seed -1 gave %v, want 2^64-1", got.Seed)
	}
	got.Seed = nil
	if got != want {
		t.Errorf("applied %+v, want %+v", got, want)
	}
	for _, s := range []string{`"7"`, `18446744073709551615`, `-9223372036854775808`} {
		var seed Seed
		if err := json.Unmarshal([]byte(s), &seed); err != nil {
			t.Errorf("seed %s: %v", s, err)
		}
	}
	for _, s := range []string{`1.5`, `1e400`, `18446744073709551616`, `true`, `"x"`, `[]`} {
		var seed Seed
		var typeErr *json.UnmarshalTypeError
		if err := json.Unmarshal([]byte(s), &seed); !errors.As(err, &typeErr) {
			t.Errorf("seed %s: %v, want a type error", s, err)
		}
	}
}
