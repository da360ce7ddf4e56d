package sample

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
)

// Params are the sampling settings of one request.
type Params struct {
	Temperature       float64 // 0: greedy
	TopK              int     // 0: no limit
	TopP              float64 // 1: no limit
	MinP              float64 // 0: off
	PresencePenalty   float64 // 0: off
	FrequencyPenalty  float64 // 0: off
	RepetitionPenalty float64 // 1: off
	// Seed makes the draws reproducible; nil picks a random seed, which
	// Sampler.Seed reports.
	Seed *uint64
}

// Overrides are one request's sampling settings as clients send them (the
// OpenAI API's fields with vLLM's and llama.cpp's extensions, decoded from
// their JSON as they are): each field set replaces the default's.
type Overrides struct {
	Temperature       *float64 `json:"temperature"`
	TopP              *float64 `json:"top_p"`
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	PresencePenalty   *float64 `json:"presence_penalty"`
	FrequencyPenalty  *float64 `json:"frequency_penalty"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	Seed              *Seed    `json:"seed"`
	// LogitBias is not one of Params, which stay comparable: the caller
	// hands it to Sampler.SetLogitBias.
	LogitBias LogitBias `json:"logit_bias"`
}

// Apply returns p with the fields o sets replaced.
func (o Overrides) Apply(p Params) Params {
	set := func(dst *float64, src *float64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&p.Temperature, o.Temperature)
	set(&p.TopP, o.TopP)
	set(&p.MinP, o.MinP)
	set(&p.PresencePenalty, o.PresencePenalty)
	set(&p.FrequencyPenalty, o.FrequencyPenalty)
	set(&p.RepetitionPenalty, o.RepetitionPenalty)
	if o.TopK != nil {
		p.TopK = *o.TopK
	}
	if o.Seed != nil {
		seed := uint64(*o.Seed)
		p.Seed = &seed
	}

	return p
}

// Seed is a request's seed. In JSON it is any 64-bit integer, a negative
// one standing for its two's complement, as clients send them (a number
// or a string holding one).
type Seed uint64

// UnmarshalJSON reads a seed; anything else is a *json.UnmarshalTypeError,
// which names the field.
func (s *Seed) UnmarshalJSON(b []byte) error {
	text := string(b)
	if uq, err := strconv.Unquote(text); err == nil {
		text = uq
	}
	if u, err := strconv.ParseUint(text, 10, 64); err == nil {
		*s = Seed(u)
		return nil
	}
	if i, err := strconv.ParseInt(text, 10, 64); err == nil {
		*s = Seed(uint64(i))
		return nil
	}
	kind := "number " + string(b)
	switch b[0] {
	case '"':
		kind = "string"
	case 't', 'f':
		kind = "bool"
	case '[':
		kind = "array"
	case '{':
		kind = "object"
	}
	return &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeFor[int64]()}
}

// LogitBias maps token ids to what is added to their logits before
// anything else (OpenAI's logit_bias): -100 all but bans a token, 100 all
// but forces it. In JSON it is an object keyed by the ids in decimal.
type LogitBias map[int]float64

// UnmarshalJSON reads the object; a key that is no token id is a
// *json.UnmarshalTypeError, which names the field.
func (b *LogitBias) UnmarshalJSON(data []byte) error {
	var raw map[string]float64
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw == nil {
		*b = nil
		return nil
	}
	m := make(LogitBias, len(raw))
	for k, v := range raw {
		id, err := strconv.Atoi(k)
		if err != nil {
			return &json.UnmarshalTypeError{Value: "key " + strconv.Quote(k), Type: reflect.TypeFor[int]()}
		}
		m[id] = v
	}
	*b = m
	return nil
}

// Bounds of logit_bias, OpenAI's: a bias in [-MaxLogitBias, MaxLogitBias],
// and at most MaxLogitBiasTokens ids.
const (
	MaxLogitBias       = 100
	MaxLogitBiasTokens = 300
)

// MaxPenalty bounds the presence and frequency penalties, as the OpenAI API
// does.
const MaxPenalty = 2

// MaxRepetitionPenalty bounds the repetition penalty and its inverse the
// smallest one: a logit divided by 1e-40 (float32 0) became +Inf, which no
// draw can take. Used penalties lie in 1..2.
const MaxRepetitionPenalty = 100

// ErrInvalid marks every error about a bad parameter, so that the API layer
// can answer 400 with the message.
var ErrInvalid = errors.New("sample: invalid parameter")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate reports the first out-of-range setting.
func (p Params) Validate() error {
	switch {
	case !finite(p.Temperature) || p.Temperature < 0:
		return invalid("temperature %v must be a number >= 0", p.Temperature)
	case p.TopK < 0:
		return invalid("top_k %d must be >= 0 (0 means no limit)", p.TopK)
	case !finite(p.TopP) || p.TopP <= 0 || p.TopP > 1:
		return invalid("top_p %v must be in (0, 1]", p.TopP)
	case !finite(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return invalid("min_p %v must be in [0, 1]", p.MinP)
	case !finite(p.PresencePenalty) || math.Abs(p.PresencePenalty) > MaxPenalty:
		return invalid("presence_penalty %v must be in [-%d, %d]", p.PresencePenalty, MaxPenalty, MaxPenalty)
	case !finite(p.FrequencyPenalty) || math.Abs(p.FrequencyPenalty) > MaxPenalty:
		return invalid("frequency_penalty %v must be in [-%d, %d]", p.FrequencyPenalty, MaxPenalty, MaxPenalty)
	case !finite(p.RepetitionPenalty) || p.RepetitionPenalty < 1.0/MaxRepetitionPenalty || p.RepetitionPenalty > MaxRepetitionPenalty:
		return invalid("repetition_penalty %v must be in [%g, %d] (1 means off)", p.RepetitionPenalty, 1.0/MaxRepetitionPenalty, MaxRepetitionPenalty)
	}
	return nil
}

// Validate reports a bias out of range, or an id vocab's tokenizer cannot
// produce.
func (b LogitBias) Validate(vocab Vocab) error {
	if len(b) > MaxLogitBiasTokens {
		return invalid("logit_bias holds %d tokens, at most %d", len(b), MaxLogitBiasTokens)
	}
	n := vocab.TokenizerSize
	if n == 0 {
		n = vocab.Size
	}
	for id, x := range b {
		switch {
		case id < 0 || id >= n:
			return invalid("logit_bias: %d is no token id of this model (they are 0 to %d)", id, n-1)
		case !finite(x) || math.Abs(x) > MaxLogitBias:
			return invalid("logit_bias of token %d is %v, not in [-%d, %d]", id, x, MaxLogitBias, MaxLogitBias)
		}
	}
	return nil
}

// Preset is one of the model card's recommended settings.
type Preset uint8

// The model card's presets for Qwen3.6-35B-A3B.
const (
	PresetThinking    Preset = iota // thinking on, general tasks
	PresetCoding                    // thinking on, precise coding
	PresetNonThinking               // thinking off
)

// Card returns the model card's settings for a preset.
func (p Preset) Card() Params {
	switch p {
	case PresetCoding:
		return Params{Temperature: 0.6, TopP: 0.95, TopK: 20, RepetitionPenalty: 1}
	case PresetNonThinking:
		return Params{Temperature: 0.7, TopP: 0.8, TopK: 20, PresencePenalty: 1.5, RepetitionPenalty: 1}
	}
	return Params{Temperature: 1.0, TopP: 0.95, TopK: 20, PresencePenalty: 1.5, RepetitionPenalty: 1}
}

// GenerationConfig is what a checkpoint's generation_config.json says about
// sampling; nil fields were absent.
type GenerationConfig struct {
	// Overrides holds the file's temperature, top_p, top_k, min_p and
	// repetition_penalty (it has no other penalty, and a seed there would
	// fix every request's draws).
	Overrides
	DoSample *bool
	EOS      []int // eos_token_id, a number or a list in the file
}

// ReadGenerationConfig parses generation_config.json. Fields other than the
// sampling ones are ignored.
func ReadGenerationConfig(data []byte) (GenerationConfig, error) {
	// Only the fields kept are decoded: a seed or penalty of any type in the
	// file must not stop the model loading.
	var raw struct {
		Temperature       *float64        `json:"temperature"`
		TopP              *float64        `json:"top_p"`
		TopK              *int            `json:"top_k"`
		MinP              *float64        `json:"min_p"`
		RepetitionPenalty *float64        `json:"repetition_penalty"`
		DoSample          *bool           `json:"do_sample"`
		EOS               json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return GenerationConfig{}, fmt.Errorf("sample: reading generation_config.json: %w", err)
	}
	gc := GenerationConfig{Overrides: Overrides{
		Temperature: raw.Temperature, TopP: raw.TopP, TopK: raw.TopK, MinP: raw.MinP, RepetitionPenalty: raw.RepetitionPenalty,
	}, DoSample: raw.DoSample}
	if len(raw.EOS) > 0 && string(raw.EOS) != "null" {
		var one int
		if err := json.Unmarshal(raw.EOS, &one); err == nil {
			gc.EOS = []int{one}
		} else if err := json.Unmarshal(raw.EOS, &gc.EOS); err != nil {
			return GenerationConfig{}, fmt.Errorf("sample: generation_config.json: eos_token_id %s is neither an id nor a list of ids", raw.EOS)
		}
	}
	for _, id := range gc.EOS {
		if id < 0 {
			return GenerationConfig{}, fmt.Errorf("sample: generation_config.json: eos_token_id %d is negative", id)
		}
	}
	return gc, nil
}

// Defaults returns the settings a request starts from. The checkpoint's
// generation config is tuned for its default mode, thinking, so its fields
// override PresetThinking only; the other presets are the card's values.
// The presence penalty always comes from the card, as the file has no such
// field. do_sample false in the file means greedy in every preset, as in
// Hugging Face.
func Defaults(gc GenerationConfig, preset Preset) Params {
	p := preset.Card()
	if preset == PresetThinking {
		p = gc.Overrides.Apply(p)
	}
	if gc.DoSample != nil && !*gc.DoSample {
		p.Temperature = 0
	}
	return p
}
