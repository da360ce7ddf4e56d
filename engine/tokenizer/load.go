package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// Limits on what a tokenizer.json may declare; Qwen3.6's has 248,077 ids.
const (
	// maxFileBytes bounds the file read by Load (Qwen's is 11 MB).
	maxFileBytes = 256 << 20
	// maxTokenID bounds token ids, and so the tables indexed by them.
	maxTokenID = 1<<21 - 1
)

// file is the part of tokenizer.json that Petal reads.
type file struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// component is a normalizer, pre-tokenizer, post-processor or decoder.
type component struct {
	Type           string          `json:"type"`
	Pretokenizers  []component     `json:"pretokenizers"`
	Pattern        json.RawMessage `json:"pattern"`
	Behavior       string          `json:"behavior"`
	Invert         bool            `json:"invert"`
	AddPrefixSpace bool            `json:"add_prefix_space"`
	UseRegex       bool            `json:"use_regex"`
}

// Load reads a Hugging Face tokenizer.json.
func Load(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxFileBytes+1)); err != nil {
		return nil, fmt.Errorf("tokenizer: reading %s: %w", path, err)
	}
	if buf.Len() > maxFileBytes {
		return nil, fmt.Errorf("%s: %w", path, bad("file larger than %d bytes", maxFileBytes))
	}
	t, err := Parse(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse builds a Tokenizer from the contents of a tokenizer.json.
func Parse(data []byte) (*Tokenizer, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, bad("%v", err)
	}
	if !isNull(f.Truncation) || !isNull(f.Padding) {
		return nil, unsupported("truncation and padding must be null")
	}
	t := &Tokenizer{}
	if err := t.setNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.setPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkByteLevel("post_processor", f.PostProcessor, true); err != nil {
		return nil, err
	}
	if err := checkByteLevel("decoder", f.Decoder, false); err != nil {
		return nil, err
	}
	if err := t.setModel(&f.Model); err != nil {
		return nil, err
	}
	if err := t.setAddedTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	t.buildDecodeTable()
	return t, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

func decodeComponent(what string, raw json.RawMessage) (*component, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, bad("%s: %v", what, err)
	}
	return &c, nil
}

func (t *Tokenizer) setNormalizer(raw json.RawMessage) error {
	c, err := decodeComponent("normalizer", raw)
	if err != nil || c == nil {
		return err
	}
	if c.Type != "NFC" {
		return unsupported("normalizer %q (only NFC or none)", c.Type)
	}
	t.nfc = true
	return nil
}

// setPreTokenizer accepts the shape byte-level BPE tokenizers with a split
// regex have: a Sequence of an isolating Split and a ByteLevel that only
// maps bytes.
func (t *Tokenizer) setPreTokenizer(raw json.RawMessage) error {
	c, err := decodeComponent("pre_tokenizer", raw)
	if err != nil {
		return err
	}
	if c == nil || c.Type != "Sequence" || len(c.Pretokenizers) != 2 ||
		c.Pretokenizers[0].Type != "Split" || c.Pretokenizers[1].Type != "ByteLevel" {
		return unsupported("pre_tokenizer must be a Sequence of Split and ByteLevel")
	}
	split, bl := c.Pretokenizers[0], c.Pretokenizers[1]
	if bl.AddPrefixSpace || bl.UseRegex {
		return unsupported("ByteLevel pre-tokenizer with add_prefix_space or use_regex")
	}
	if split.Behavior != "Isolated" || split.Invert {
		return unsupported("Split pre-tokenizer with behavior %q, invert %v (only Isolated, false)", split.Behavior, split.Invert)
	}
	var pat struct {
		Regex *string `json:"Regex"`
	}
	if err := json.Unmarshal(split.Pattern, &pat); err != nil {
		return bad("Split pattern: %v", err)
	}
	if pat.Regex == nil {
		return unsupported("Split pattern must be a Regex")
	}
	t.pattern, err = compilePattern(*pat.Regex)
	return err
}

// checkByteLevel accepts a ByteLevel component (or none, when allowed).
func checkByteLevel(what string, raw json.RawMessage, nullOK bool) error {
	c, err := decodeComponent(what, raw)
	if err != nil {
		return err
	}
	if c == nil && nullOK {
		return nil
	}
	if c == nil || c.Type != "ByteLevel" {
		return unsupported("%s must be ByteLevel", what)
	}
	return nil
}

func (t *Tokenizer) setModel(m *modelJSON) error {
	if m.Type != "BPE" {
		return unsupported("model type %q (only BPE)", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return unsupported("BPE dropout %v", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" ||
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return unsupported("BPE with a subword prefix or an end-of-word suffix")
	}
	if len(m.Vocab) == 0 {
		return bad("model has no vocab")
	}
	maxID := -1
	for s, id := range m.Vocab {
		if id < 0 || id > maxTokenID {
			return bad("vocab id %d of %q out of range [0, %d]", id, s, maxTokenID)
		}
		maxID = max(maxID, id)
	}
	t.tokens = make([]string, maxID+1)
	t.known = make([]bool, maxID+1)
	for s, id := range m.Vocab {
		if t.known[id] {
			return bad("vocab id %d given to both %q and %q", id, t.tokens[id], s)
		}
		t.tokens[id], t.known[id] = s, true
	}
	t.vocab = m.Vocab
	t.bpe = &bpe{merges: make(map[uint64]uint64, len(m.Vocab))}
	if m.IgnoreMerges {
		t.bpe.vocab = m.Vocab
	}
	// Every byte must have its one-byte token, so no word is ever unknown;
	// that is what makes unk_token and byte_fallback irrelevant.
	for b := range 256 {
		id, ok := m.Vocab[string(byteRune[b])]
		if !ok {
			return bad("vocab lacks the token of byte %#02x (%q)", b, byteRune[b])
		}
		t.bpe.byteID[b] = int32(id)
	}
	pairs, err := parseMerges(m.Merges)
	if err != nil {
		return err
	}
	for rank, p := range pairs {
		left, ok1 := m.Vocab[p[0]]
		right, ok2 := m.Vocab[p[1]]
		merged, ok3 := m.Vocab[p[0]+p[1]]
		if !ok1 || !ok2 || !ok3 {
			return bad("merge %d (%q %q) uses a token missing from the vocab", rank, p[0], p[1])
		}
		// A repeated pair keeps its last rank, as in the library.
		t.bpe.merges[pairKey(int32(left), int32(right))] = uint64(rank)<<32 | uint64(merged)
	}
	return nil
}

// parseMerges reads merges in either format: [["a","b"], ...] or the
// legacy ["a b", ...] (where "#version" lines are comments).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, bad("model has no merges")
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		out := make([][2]string, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return nil, bad("merge %d has %d parts, want 2", i, len(p))
			}
			out[i] = [2]string{p[0], p[1]}
		}
		return out, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, bad("merges are neither pairs nor strings: %v", err)
	}
	out := make([][2]string, 0, len(lines))
	for _, l := range lines {
		if strings.HasPrefix(l, "#version") {
			continue
		}
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, bad("merge %d (%q) is not two tokens separated by one space", len(out), l)
		}
		out = append(out, [2]string{a, b})
	}
	return out, nil
}

func (t *Tokenizer) setAddedTokens(list []addedTokenJSON) error {
	t.added = make(map[string]*addedToken, len(list))
	var raw, normalized []*addedToken
	for i, a := range list {
		if a.ID == nil || *a.ID < 0 || *a.ID > maxTokenID {
			return bad("added token %d (%q) has no id in [0, %d]", i, a.Content, maxTokenID)
		}
		if a.Content == "" {
			return bad("added token %d is empty", *a.ID)
		}
		id := *a.ID
		if id < len(t.known) && t.known[id] && t.tokens[id] != a.Content {
			return bad("added token %q takes id %d of vocab token %q", a.Content, id, t.tokens[id])
		}
		if prev, dup := t.added[a.Content]; dup && prev.id != id {
			return bad("added token %q has ids %d and %d", a.Content, prev.id, id)
		}
		tok := &addedToken{id: id, content: a.Content, special: a.Special, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, normalized: a.Normalized}
		for id >= len(t.tokens) {
			t.tokens = append(t.tokens, "")
			t.known = append(t.known, false)
		}
		if t.known[id] && t.tokens[id] != a.Content {
			return bad("added tokens %q and %q share id %d", t.tokens[id], a.Content, id)
		}
		t.tokens[id], t.known[id] = a.Content, true
		t.added[a.Content] = tok
		if a.Normalized {
			// The library matches a normalized token by its normalized form.
			n := *tok
			n.content = t.normalize(a.Content)
			normalized = append(normalized, &n)
		} else {
			raw = append(raw, tok)
		}
	}
	t.special = make([]bool, len(t.tokens))
	for _, a := range t.added {
		t.special[a.id] = a.special
	}
	t.rawAdded = newAddedMatcher(raw)
	t.normAdded = newAddedMatcher(normalized)
	return nil
}

// buildDecodeTable stores the bytes of every token back to back.
func (t *Tokenizer) buildDecodeTable() {
	t.offsets = make([]uint32, len(t.tokens)+1)
	for id, s := range t.tokens {
		t.offsets[id] = uint32(len(t.arena))
		if t.known[id] {
			t.arena = append(t.arena, tokenBytes(s)...)
		}
	}
	t.offsets[len(t.tokens)] = uint32(len(t.arena))
	t.maxID = len(t.tokens) - 1
	t.size = 0
	for _, k := range t.known {
		if k {
			t.size++
		}
	}
}
