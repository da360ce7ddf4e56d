package reply

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse checks that no text makes the parser panic, that any split of
// the text parses like the whole, and that arguments are always JSON.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.txtar")
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(strings.TrimSuffix(readTxtar(string(data)).files["input"], "\n"), uint64(7), true)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		f.Add(genDocument(r), r.Uint64(), r.IntN(2) == 0)
	}
	tools, err := ToolsFromOpenAI([]byte(propertyTools))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string, seed uint64, thinking bool) {
		opts := Options{Thinking: thinking, Tools: tools, NewID: testID}
		whole, err := Parse(text, opts)
		if err != nil {
			t.Fatal(err)
		}
		cuts := randomCuts(rand.New(rand.NewPCG(seed, 0)), len(text), 1+int(seed%16))
		if got := parseSplit(t, text, opts, cuts); !equalResults(got, whole) {
			t.Fatalf("cut at %v:\ngot  %+v\nwant %+v", cuts, got, whole)
		}
		if utf8.ValidString(text) {
			for i, c := range whole.ToolCalls {
				if !json.Valid([]byte(c.Arguments)) {
					t.Fatalf("call %d arguments not JSON: %s", i, c.Arguments)
				}
			}
		}
	})
}
