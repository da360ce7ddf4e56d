package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// Qwen3's split regex, for the small tokenizers built by these tests.
const qwen3Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// tinySpec describes a small tokenizer.json: one token per byte (id = the
// byte), then one per merge result, then extra vocab and added tokens.
type tinySpec struct {
	merges       [][2]string
	extraVocab   []string
	added        []addedTokenJSON
	ignoreMerges bool
	legacyMerges bool
}

// tinyJSON writes the tokenizer.json of spec; vocab strings use the
// byte-level alphabet.
func tinyJSON(t testing.TB, spec tinySpec) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteRune[b])] = b
	}
	add := func(s string) {
		if _, ok := vocab[s]; !ok {
			vocab[s] = len(vocab)
		}
	}
	var merges any
	legacy := []string{}
	for _, m := range spec.merges {
		add(m[0] + m[1])
		legacy = append(legacy, m[0]+" "+m[1])
	}
	merges = spec.merges
	if spec.merges == nil {
		merges = [][2]string{}
	}
	if spec.legacyMerges {
		merges = legacy
	}
	for _, s := range spec.extraVocab {
		add(s)
	}
	added := spec.added
	if added == nil {
		added = []addedTokenJSON{}
	}
	doc := map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen3Regex}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": spec.ignoreMerges,
			"vocab": vocab, "merges": merges},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func tiny(t testing.TB, spec tinySpec) *Tokenizer {
	t.Helper()
	tok, err := Parse(tinyJSON(t, spec))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return tok
}

func mustID(t *testing.T, tok *Tokenizer, s string) int {
	t.Helper()
	id, ok := tok.TokenID(s)
	if !ok {
		t.Fatalf("TokenID(%q) not found", s)
	}
	return id
}

func checkEncode(t *testing.T, tok *Tokenizer, text string, want []int) {
	t.Helper()
	if got := tok.Encode(text); !slices.Equal(got, want) {
		t.Errorf("Encode(%q) = %v, want %v", text, got, want)
	}
}

func TestMergesApplyByRank(t *testing.T) {
	abFirst := tiny(t, tinySpec{merges: [][2]string{{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "a"}}})
	checkEncode(t, abFirst, "abc", []int{mustID(t, abFirst, "abc")})
	checkEncode(t, abFirst, "bca", []int{mustID(t, abFirst, "bc"), 'a'})
	// Equal ranks merge leftmost first.
	checkEncode(t, abFirst, "aaa", []int{mustID(t, abFirst, "aa"), 'a'})

	bcFirst := tiny(t, tinySpec{merges: [][2]string{{"b", "c"}, {"a", "b"}, {"ab", "c"}}})
	checkEncode(t, bcFirst, "abc", []int{'a', mustID(t, bcFirst, "bc")})

	legacy := tiny(t, tinySpec{merges: [][2]string{{"b", "c"}, {"a", "b"}, {"ab", "c"}}, legacyMerges: true})
	checkEncode(t, legacy, "abc abcabc", bcFirst.Encode("abc abcabc"))
}

func TestIgnoreMerges(t *testing.T) {
	spec := tinySpec{merges: [][2]string{{"a", "b"}, {"ab", "c"}}, extraVocab: []string{"abcd"}}
	plain := tiny(t, spec)
	checkEncode(t, plain, "abcd", []int{mustID(t, plain, "abc"), 'd'})
	spec.ignoreMerges = true
	whole := tiny(t, spec)
	checkEncode(t, whole, "abcd", []int{mustID(t, whole, "abcd")})
	checkEncode(t, whole, "abcde", []int{mustID(t, whole, "abc"), 'd', 'e'})
}

func TestAddedTokenRules(t *testing.T) {
	tok := tiny(t, tinySpec{added: []addedTokenJSON{
		{ID: ptr(400), Content: "<l>", LStrip: true},
		{ID: ptr(401), Content: "<r>", RStrip: true},
		{ID: ptr(402), Content: "<w>", SingleWord: true},
		{ID: ptr(403), Content: "<s>", Special: true},
		{ID: ptr(404), Content: "\u00e9", Normalized: true},
		{ID: ptr(405), Content: "<a"},
		{ID: ptr(406), Content: "<ab>"},
		{ID: ptr(407), Content: "o\u0308"},
	}})
	const sp = ' '
	cases := []struct {
		text string
		want []int
	}{
		{"x  <l>y", []int{'x', 400, 'y'}},
		{"x<l>  y", []int{'x', 400, sp, sp, 'y'}},
		{"x<r>  y", []int{'x', 401, 'y'}},
		{"<r>  <r>", []int{401, 401}},
		// A single-word token inside a word is plain text.
		{"a<w>b", []int{'a', '<', 'w', '>', 'b'}},
		{"a <w> b", []int{'a', sp, 402, sp, 'b'}},
		{"<w>", []int{402}},
		// Leftmost, then longest.
		{"<ab>", []int{406}},
		{"<ac", []int{405, 'c'}},
		// "é" is matched after NFC, "ö" decomposed only before it.
		{"e\u0301", []int{404}},
		{"o\u0308", []int{407}},
		{"\u00f6", []int{0xC3, 0xB6}},
		{"<s>hi<s>", []int{403, 'h', 'i', 403}},
	}
	for _, c := range cases {
		checkEncode(t, tok, c.text, c.want)
	}
	ids := tok.Encode("<s>hi<s>")
	if got := tok.Decode(ids); got != "<s>hi<s>" {
		t.Errorf("Decode = %q", got)
	}
	if got := tok.DecodeSkipSpecial(ids); got != "hi" {
		t.Errorf("DecodeSkipSpecial = %q, want %q", got, "hi")
	}
	if !tok.IsSpecial(403) || tok.IsSpecial(400) || tok.IsSpecial('a') {
		t.Errorf("IsSpecial wrong for 403, 400 or 'a'")
	}
}

// TestEncodeText: text read as plain text matches no added token, so
// code holding "<|im_end|>" or a FIM marker cannot write the control
// token; it decodes back to itself, and text without any encodes as
// Encode does.
func TestEncodeText(t *testing.T) {
	tok := tiny(t, tinySpec{merges: [][2]string{{"<", "|"}}, added: []addedTokenJSON{
		{ID: ptr(400), Content: "<|im_end|>", Special: true},
		{ID: ptr(401), Content: "<|fim_middle|>"},
		{ID: ptr(402), Content: "\u00e9", Normalized: true},
	}})
	for _, text := range []string{"a<|im_end|>b", "x = '<|fim_middle|>'\n", "<|im_end|><|im_end|>", "e\u0301", ""} {
		ids := tok.EncodeText(text)
		for _, id := range ids {
			if id >= 400 {
				t.Errorf("EncodeText(%q) = %v: holds added token %d", text, ids, id)
			}
		}
		if got := tok.Decode(ids); got != norm.NFC.String(text) {
			t.Errorf("Decode(EncodeText(%q)) = %q", text, got)
		}
		if enc := tok.Encode(text); text != "" && text != "e\u0301" && !slices.ContainsFunc(enc, func(id int) bool { return id >= 400 }) {
			t.Errorf("Encode(%q) = %v: the test's text should hold an added token", text, enc)
		}
	}
	plain := "def f(x):\n    return x * 2\n"
	if got, want := tok.EncodeText(plain), tok.Encode(plain); !slices.Equal(got, want) {
		t.Errorf("EncodeText(%q) = %v, Encode %v", plain, got, want)
	}
	if got := tok.AppendEncodeText([]int{400}, "<|"); !slices.Equal(got, []int{400, mustID(t, tok, "<|")}) {
		t.Errorf("AppendEncodeText = %v", got)
	}
}

func TestVocabQueries(t *testing.T) {
	tok := tiny(t, tinySpec{merges: [][2]string{{"a", "b"}}, added: []addedTokenJSON{{ID: ptr(300), Content: "<x>", Special: true}}})
	if got, want := tok.VocabSize(), 256+1+1; got != want {
		t.Errorf("VocabSize = %d, want %d", got, want)
	}
	if got := tok.MaxID(); got != 300 {
		t.Errorf("MaxID = %d, want 300", got)
	}
	for id, want := range map[int]bool{0: true, 256: true, 257: false, 299: false, 300: true, 301: false, -1: false} {
		if got := tok.Has(id); got != want {
			t.Errorf("Has(%d) = %v, want %v", id, got, want)
		}
	}
	if s, ok := tok.Token(' '); !ok || s != "Ġ" {
		t.Errorf("Token(32) = %q, %v; want the byte-level space", s, ok)
	}
	if _, ok := tok.Token(299); ok {
		t.Errorf("Token(299) found a hole")
	}
	if got := tok.Decode([]int{'a', 299, -5, 1 << 30, 'b'}); got != "ab" {
		t.Errorf("Decode skips unknown ids: got %q", got)
	}
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, tinyJSON(t, tinySpec{}), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	checkEncode(t, tok, "hi", []int{'h', 'i'})
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	good := string(tinyJSON(t, tinySpec{merges: [][2]string{{"a", "b"}}}))
	edit := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("fixture lacks %q", old)
		}
		return strings.Replace(good, old, new, 1)
	}
	cases := []struct {
		name, data string
		want       error
		says       string
	}{
		{"not json", "{", ErrBadTokenizer, "unexpected end"},
		{"no vocab", `{"model":{"type":"BPE","merges":[]},"pre_tokenizer":` + preTok(qwen3Regex) + `,"decoder":{"type":"ByteLevel"}}`, ErrBadTokenizer, "no vocab"},
		{"merge of unknown", edit(`"merges":[["a","b"]]`, `"merges":[["a","q"]]`), ErrBadTokenizer, "missing from the vocab"},
		{"merge of 3 parts", edit(`"merges":[["a","b"]]`, `"merges":[["a","b","c"]]`), ErrBadTokenizer, "3 parts"},
		{"legacy merge", edit(`"merges":[["a","b"]]`, `"merges":["a b c"]`), ErrBadTokenizer, "one space"},
		{"merges of numbers", edit(`"merges":[["a","b"]]`, `"merges":[1]`), ErrBadTokenizer, "neither pairs nor strings"},
		{"negative id", edit(`"Ā":0`, `"Ā":-7`), ErrBadTokenizer, "out of range"},
		{"huge id", edit(`"Ā":0`, `"Ā":99999999`), ErrBadTokenizer, "out of range"},
		{"shared id", edit(`"Ā":0`, `"Ā":1`), ErrBadTokenizer, "given to both"},
		{"missing byte", edit(`"Ā":0,`, ``), ErrBadTokenizer, "lacks the token of byte 0x00"},
		{"added without id", edit(`"added_tokens":[]`, `"added_tokens":[{"content":"<x>"}]`), ErrBadTokenizer, "has no id"},
		{"added empty", edit(`"added_tokens":[]`, `"added_tokens":[{"id":300,"content":""}]`), ErrBadTokenizer, "is empty"},
		{"added on vocab id", edit(`"added_tokens":[]`, `"added_tokens":[{"id":5,"content":"<x>"}]`), ErrBadTokenizer, "takes id 5"},
		{"added twice", edit(`"added_tokens":[]`, `"added_tokens":[{"id":300,"content":"<x>"},{"id":301,"content":"<x>"}]`), ErrBadTokenizer, "has ids 300 and 301"},
		{"model type", edit(`"type":"BPE"`, `"type":"WordPiece"`), ErrUnsupported, "WordPiece"},
		{"dropout", edit(`"dropout":null`, `"dropout":0.1`), ErrUnsupported, "dropout"},
		{"suffix", edit(`"end_of_word_suffix":""`, `"end_of_word_suffix":"</w>"`), ErrUnsupported, "suffix"},
		{"normalizer", edit(`{"type":"NFC"}`, `{"type":"NFKC"}`), ErrUnsupported, "NFKC"},
		{"decoder", edit(`"decoder":{"add_prefix_space":false,"trim_offsets":false,"type":"ByteLevel","use_regex":false}`, `"decoder":null`), ErrUnsupported, "decoder must be ByteLevel"},
		{"truncation", edit(`"truncation":null`, `"truncation":{"max_length":8}`), ErrUnsupported, "truncation"},
		{"regex", edit(`\\s+(?!\\S)`, `\\s+(?=\\S)`), ErrUnsupported, "groups other than"},
		{"behavior", edit(`"Isolated"`, `"Removed"`), ErrUnsupported, "Removed"},
		{"string pattern", edit(`{"Regex":`, `{"String":`), ErrUnsupported, "must be a Regex"},
		{"pre-tokenizer", edit(`"type":"Sequence"`, `"type":"Whitespace"`), ErrUnsupported, "Sequence of Split and ByteLevel"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.data))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Parse error %v, want one marked %v", c.name, err, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: error %q does not say %q", c.name, err, c.says)
		}
	}
}

func preTok(regex string) string {
	r, _ := json.Marshal(regex)
	return `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + string(r) +
		`},"behavior":"Isolated","invert":false},{"type":"ByteLevel"}]}`
}

func ptr(i int) *int { return &i }
