package tokenizer

import (
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer encodes text to token ids and decodes ids to text. It is safe
// for concurrent use.
type Tokenizer struct {
	nfc     bool
	pattern *pattern
	bpe     *bpe
	// vocab maps the model's token strings (byte-level alphabet) to ids.
	vocab map[string]int
	// added maps added tokens' contents to them.
	added map[string]*addedToken
	// rawAdded finds the added tokens matched before normalization,
	// normAdded those matched after it; nil when there are none.
	rawAdded, normAdded *addedMatcher

	// Indexed by id: the token as written in the file, whether the id is
	// assigned, whether it is a special token.
	tokens  []string
	known   []bool
	special []bool
	// The decoded bytes of token id are arena[offsets[id]:offsets[id+1]].
	arena   []byte
	offsets []uint32
	maxID   int
	size    int

	cache   wordCache
	scratch sync.Pool
}

// VocabSize is the number of ids the tokenizer knows, added tokens
// included.
func (t *Tokenizer) VocabSize() int { return t.size }

// MaxID is the largest id the tokenizer knows. Ids up to it that Has
// reports false for are never produced.
func (t *Tokenizer) MaxID() int { return t.maxID }

// Has reports whether id is assigned to a token.
func (t *Tokenizer) Has(id int) bool { return id >= 0 && id <= t.maxID && t.known[id] }

// IsSpecial reports whether id is a special token (skipped by
// DecodeSkipSpecial).
func (t *Tokenizer) IsSpecial(id int) bool { return t.Has(id) && t.special[id] }

// TokenID returns the id of a token given as written in tokenizer.json: an
// added token's content, such as "<|im_end|>", or a vocab entry in the
// byte-level alphabet, such as "Ġthe".
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if a, ok := t.added[s]; ok {
		return a.id, true
	}
	id, ok := t.vocab[s]
	return id, ok
}

// Token returns the token of id as written in tokenizer.json.
func (t *Tokenizer) Token(id int) (string, bool) {
	if !t.Has(id) {
		return "", false
	}
	return t.tokens[id], true
}

// Encode returns the ids of text. Special tokens written in the text are
// recognised, as the library does by default. Invalid UTF-8 is encoded
// byte by byte like any other bytes.
func (t *Tokenizer) Encode(text string) []int {
	return t.AppendEncode(make([]int, 0, len(text)/3+1), text)
}

// AppendEncode appends the ids of text to dst and returns the extended
// slice.
func (t *Tokenizer) AppendEncode(dst []int, text string) []int {
	sc, _ := t.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	split := addedSplitter{m: t.rawAdded, s: text}
	for {
		piece, tok := split.next()
		dst = t.encodeNormalizing(dst, piece, sc)
		if tok == nil {
			break
		}
		dst = append(dst, tok.id)
	}
	t.scratch.Put(sc)
	return dst
}

// EncodeText returns the ids of text read as plain text: no added token
// is matched in it, special or not, so "<|im_end|>" written in it is
// encoded as the characters it is made of (what the library's
// split_special_tokens does for special tokens). A prompt built around
// text from outside, such as a file's code between fill-in-the-middle
// markers, takes the text this way and the markers by TokenID, so the
// text cannot write control tokens.
func (t *Tokenizer) EncodeText(text string) []int {
	return t.AppendEncodeText(make([]int, 0, len(text)/3+1), text)
}

// AppendEncodeText appends the ids of text, read as EncodeText reads it,
// to dst and returns the extended slice.
func (t *Tokenizer) AppendEncodeText(dst []int, text string) []int {
	if text == "" {
		return dst
	}
	sc, _ := t.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	dst = t.encodeWords(dst, t.normalize(text), sc)
	t.scratch.Put(sc)
	return dst
}

// encodeNormalizing encodes text that holds no raw-matched added token.
func (t *Tokenizer) encodeNormalizing(dst []int, text string, sc *scratch) []int {
	if text == "" {
		return dst
	}
	text = t.normalize(text)
	split := addedSplitter{m: t.normAdded, s: text}
	for {
		piece, tok := split.next()
		dst = t.encodeWords(dst, piece, sc)
		if tok == nil {
			return dst
		}
		dst = append(dst, tok.id)
	}
}

func (t *Tokenizer) normalize(s string) string {
	if !t.nfc || norm.NFC.QuickSpanString(s) == len(s) {
		return s
	}
	return norm.NFC.String(s)
}

// encodeWords pre-tokenizes normalized text and encodes each word.
func (t *Tokenizer) encodeWords(dst []int, text string, sc *scratch) []int {
	m := t.pattern.matcher(text)
	for pos := 0; pos < len(text); {
		end := m.nextPiece(pos)
		dst = t.encodeWord(dst, text[pos:end], sc)
		pos = end
	}
	return dst
}

func (t *Tokenizer) encodeWord(dst []int, word string, sc *scratch) []int {
	cacheable := len(word) <= maxCachedWordBytes
	if cacheable {
		if ids, ok := t.cache.get(word); ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	sc.ids = t.bpe.merge(sc.ids[:0], word, sc)
	for _, id := range sc.ids {
		dst = append(dst, int(id))
	}
	if cacheable {
		t.cache.put(word, append([]int32(nil), sc.ids...))
	}
	return dst
}

// tokenBytes returns the decoded bytes of id, and false for an id that
// decoding skips: unknown, or special when skipSpecial is set.
func (t *Tokenizer) tokenBytes(id int, skipSpecial bool) ([]byte, bool) {
	if !t.Has(id) || skipSpecial && t.special[id] {
		return nil, false
	}
	return t.arena[t.offsets[id]:t.offsets[id+1]], true
}

// Bytes returns the bytes id decodes to, special tokens included, and
// false for an unknown id. A token may end inside a UTF-8 character.
func (t *Tokenizer) Bytes(id int) ([]byte, bool) { return t.tokenBytes(id, false) }

// Decode returns the text of ids, special tokens included. Unknown ids are
// skipped; bytes that do not form valid UTF-8 (a sequence cut in the middle
// of a character) become U+FFFD.
func (t *Tokenizer) Decode(ids []int) string { return t.decode(ids, false) }

// DecodeSkipSpecial is Decode without the special tokens.
func (t *Tokenizer) DecodeSkipSpecial(ids []int) string { return t.decode(ids, true) }

func (t *Tokenizer) decode(ids []int, skipSpecial bool) string {
	var buf []byte
	for _, id := range ids {
		if b, ok := t.tokenBytes(id, skipSpecial); ok {
			buf = append(buf, b...)
		}
	}
	if utf8.Valid(buf) {
		return string(buf)
	}
	out, _ := appendLossy(make([]byte, 0, len(buf)+8), buf, true)
	return string(out)
}
