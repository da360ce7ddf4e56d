package tokenizer

import (
	"errors"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzEncode checks, on the real Qwen3 tokenizer, that any text encodes
// without panicking to known ids, that valid UTF-8 comes back from Decode
// equal up to NFC, and that the stream decoder agrees with Decode.
func FuzzEncode(f *testing.F) {
	_, texts, _ := loadFixtures(f)
	for _, name := range []string{"emoji_zwj", "combining_decomposed", "whitespace", "specials_adjacent", "contractions"} {
		f.Add(texts[name])
	}
	f.Add("\xff\xfe<|im_end|>\xe2\x82 a")
	f.Add("<\u0338|im_end|>\u0338")
	f.Fuzz(func(t *testing.T, text string) {
		_, _, toks := loadFixtures(t)
		tok := toks["qwen3"]
		ids := tok.Encode(text)
		for _, id := range ids {
			if !tok.Has(id) {
				t.Fatalf("Encode(%q) produced unknown id %d", text, id)
			}
		}
		got := tok.Decode(ids)
		if !utf8.ValidString(got) {
			t.Fatalf("Decode gave invalid UTF-8 %q", got)
		}
		// Added tokens are cut out before normalization, so the result
		// equals NFC(text) only up to normalization across their edges.
		if utf8.ValidString(text) && norm.NFC.String(got) != norm.NFC.String(text) {
			t.Fatalf("Decode(Encode(%q)) = %q", text, got)
		}
		if s := streamDecode(t, tok, ids, false); s != got {
			t.Fatalf("stream decode %q, Decode %q", s, got)
		}
	})
}

// FuzzParse checks that any file either loads or fails with a marked error,
// and that what loads can encode and decode.
func FuzzParse(f *testing.F) {
	f.Add(tinyJSON(f, tinySpec{merges: [][2]string{{"a", "b"}, {"ab", "c"}}}))
	f.Add(tinyJSON(f, tinySpec{merges: [][2]string{{"a", "b"}}, legacyMerges: true, ignoreMerges: true,
		added: []addedTokenJSON{{ID: ptr(300), Content: "<x>", LStrip: true, RStrip: true, SingleWord: true, Normalized: true}}}))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrBadTokenizer) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("unmarked error %v", err)
			}
			return
		}
		ids := tok.Encode("abc <x> e\u0301 \xff 12")
		_ = tok.Decode(ids)
		_ = tok.DecodeSkipSpecial(ids)
	})
}
