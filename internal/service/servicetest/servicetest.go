// Package servicetest provides what tests of the generation service and the
// layers above it need: a checkpoint folder with a small tokenizer and the
// Qwen3.5 chat template, and a scripted model whose replies are chosen by
// the test, so that protocol tests are deterministic.
package servicetest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/tokenizer"
)

// Vocab is the scripted model's vocabulary, the size of the reference
// fixtures' (engine/testdata/fixtures).
const Vocab = 512

// AddedTokens follow the 256 byte tokens in the test tokenizer, in this id
// order; the first three are special.
var AddedTokens = []string{
	"<|endoftext|>", "<|im_start|>", "<|im_end|>",
	"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
}

// EndID is the id of "<|im_end|>", which ends a scripted reply.
const EndID = 256 + 2

// qwen3Regex is Qwen3's pre-tokenizer split.
const qwen3Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// TemplatePath is the Qwen3.5 chat template kept with the chattemplate
// package's test data.
func TemplatePath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "engine", "chattemplate", "testdata", "templates", "qwen3.5.jinja")
}

// writeFolder writes tokenizer.json (one token per byte, no merges, then
// AddedTokens) and chat_template.jinja into dir.
func writeFolder(dir string) error {
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteRune(b))] = b
	}
	var added []map[string]any
	for i, s := range AddedTokens {
		added = append(added, map[string]any{"id": 256 + i, "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": i < 3})
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	doc := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added,
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen3Regex}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}},
		"post_processor": byteLevel, "decoder": byteLevel,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": []any{}},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644); err != nil {
		return err
	}
	tmpl, err := os.ReadFile(TemplatePath())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "chat_template.jinja"), tmpl, 0o644)
}

// MaxPositions is the context length of the scripted models the tests of
// the service and the layers above it use.
const MaxPositions = 4096

// Folder writes the test checkpoint folder (tokenizer and template, no
// weights) into a temporary folder of t and loads its tokenizer.
func Folder(t testing.TB) (string, *tokenizer.Tokenizer) {
	t.Helper()
	dir := t.TempDir()
	if err := writeFolder(dir); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, tok
}

// FixtureFolder writes the test checkpoint folder into a temporary folder
// of t with the weights of the reference fixture of that name
// (engine/testdata/fixtures/<fixture>), so that a real backend opens it.
func FixtureFolder(t testing.TB, fixture string) string {
	t.Helper()
	dir := t.TempDir()
	if err := writeFolder(dir); err != nil {
		t.Fatal(err)
	}
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "..", "..", "..", "engine", "testdata", "fixtures", fixture)
	if err := copyWeights(dir, src); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyWeights copies the checkpoint files (config and safetensors) of
// fixture into dir, so that a real backend can open dir.
func copyWeights(dir, fixture string) error {
	files, err := os.ReadDir(fixture)
	if err != nil {
		return err
	}
	for _, f := range files {
		name := f.Name()
		if name != "config.json" && filepath.Ext(name) != ".safetensors" && name != "model.safetensors.index.json" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(fixture, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// byteRune is the GPT-2 byte-level alphabet: printable bytes stand for
// themselves, the others are moved up to 256 and beyond.
func byteRune(b int) rune {
	switch {
	case b >= '!' && b <= '~', b >= 0xA1 && b <= 0xAC, b >= 0xAE && b <= 0xFF:
		return rune(b)
	}
	n := 0
	for c := 0; c < b; c++ {
		if !(c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE && c <= 0xFF) {
			n++
		}
	}
	return rune(256 + n)
}

// Script chooses a reply for a prompt: the token ids the model will
// produce, in order. After them the model produces EndID.
type Script func(prompt []int) []int

// Text is a Script over text: reply gets the decoded prompt and returns the
// reply's text, which is tokenized as the model would have written it.
func Text(tok *tokenizer.Tokenizer, reply func(prompt string) string) Script {
	return func(prompt []int) []int { return tok.Encode(reply(tok.Decode(prompt))) }
}

// Model is an engine.Model whose logits force the tokens of a Script:
// the first time a sequence is asked for logits after tokens that are not
// the script's own, the tokens so far are the prompt.
type Model struct {
	cfg       checkpoint.Config
	script    Script
	stepDelay atomic.Int64 // nanoseconds
	live      atomic.Int64
	forwarded atomic.Int64
}

// NewModel returns a scripted model with a context of maxPositions.
func NewModel(maxPositions int, script Script) *Model {
	return &Model{cfg: checkpoint.Config{Vocab: Vocab, MaxPositions: maxPositions, EOS: []int{EndID}}, script: script}
}

// Config is the model's configuration.
func (m *Model) Config() *checkpoint.Config { return &m.cfg }

// NewSequence starts an empty sequence.
func (m *Model) NewSequence() (engine.Sequence, error) {
	m.live.Add(1)
	return &sequence{m: m}, nil
}

// Close does nothing: the model holds no resources.
func (m *Model) Close() error { return nil }

// SetStepDelay makes every Forward sleep for d, so that generations are
// slow enough to cancel; it may be called while sequences run.
func (m *Model) SetStepDelay(d time.Duration) { m.stepDelay.Store(int64(d)) }

// Live is the number of sequences not yet closed.
func (m *Model) Live() int64 { return m.live.Load() }

// Forwarded is the number of tokens run through the model.
func (m *Model) Forwarded() int64 { return m.forwarded.Load() }

type sequence struct {
	m       *Model
	history []int
	start   int   // where the current reply begins in history
	reply   []int // the script's reply to history[:start]
	closed  bool
}

// ForcedLogit is the logit of the scripted token; every other is 0, so any
// sampler picks the scripted one.
const ForcedLogit = 1000

func (s *sequence) Forward(tokens []int, out []float32) error {
	if s.closed {
		return fmt.Errorf("servicetest: %w", engine.ErrClosed)
	}
	if err := engine.CheckTokens(tokens, Vocab); err != nil {
		return err
	}
	all, err := engine.CheckOut(out, len(tokens), Vocab)
	if err != nil {
		return err
	}
	if len(s.history)+len(tokens) > s.m.cfg.MaxPositions {
		return fmt.Errorf("servicetest: %d tokens exceed %d positions", len(s.history)+len(tokens), s.m.cfg.MaxPositions)
	}
	if d := time.Duration(s.m.stepDelay.Load()); d > 0 {
		time.Sleep(d)
	}
	s.m.forwarded.Add(int64(len(tokens)))
	for i, t := range tokens {
		s.history = append(s.history, t)
		var row []float32
		switch {
		case all:
			row = out[i*Vocab : (i+1)*Vocab]
		case len(out) > 0 && i == len(tokens)-1:
			row = out
		default:
			continue
		}
		clear(row)
		row[s.next()] = ForcedLogit
	}
	return nil
}

// next is the scripted token after the history.
func (s *sequence) next() int {
	gen := s.history[min(s.start, len(s.history)):]
	if s.reply == nil || len(gen) >= len(s.reply) || !slices.Equal(gen, s.reply[:len(gen)]) {
		s.start = len(s.history)
		s.reply = append(s.m.script(slices.Clone(s.history)), EndID)
		gen = nil
	}
	return s.reply[len(gen)]
}

func (s *sequence) Len() int { return len(s.history) }

func (s *sequence) Fork() (engine.Sequence, error) {
	if s.closed {
		return nil, fmt.Errorf("servicetest: %w", engine.ErrClosed)
	}
	s.m.live.Add(1)
	return &sequence{m: s.m, history: slices.Clone(s.history), start: s.start, reply: s.reply}, nil
}

func (s *sequence) Bytes() int64 { return int64(8 * cap(s.history)) }

func (s *sequence) Close() error {
	if !s.closed {
		s.closed = true
		s.m.live.Add(-1)
	}
	return nil
}
