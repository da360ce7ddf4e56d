package grammar

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// boundedStrings is an anyOf of k strings of distinct maxLengths from
// first on, which no merge can make one: k states inside a string.
func boundedStrings(k, first int) string {
	alts := make([]string, k)
	for i := range alts {
		alts[i] = fmt.Sprintf(`{"type":"string","maxLength":%d}`, first+i)
	}
	return `{"anyOf":[` + strings.Join(alts, ",") + `]}`
}

// walkedMask is the mask the trie of every token gives, token by token as
// the matcher steps bytes: what the tables must agree with.
func walkedMask(m *Matcher) []uint64 {
	mask := make([]uint64, (m.v.Size()+63)/64)
	m.ctx = nil
	m.walk(&m.v.all, 0, m.states, 0, mask)
	return mask
}

// TestBoundedStringMask: inside strings of bounded length the mask comes
// from the tables as inside free ones, and agrees with the walk of every
// token: near the bound (room for 0, 1 or a few characters), in an escape,
// in a \u escape, in a UTF-8 character, and for keys beside them.
func TestBoundedStringMask(t *testing.T) {
	_, v := qwen3(t)
	for _, c := range []struct{ schema, prefix string }{
		{`{"type":"string","maxLength":3}`, `"`},
		{`{"type":"string","maxLength":3}`, `"ab`},
		{`{"type":"string","maxLength":3}`, `"abc`},
		{`{"type":"string","maxLength":3,"minLength":2}`, `"a`},
		{`{"type":"string","minLength":5}`, `"ab`},
		{`{"type":"string","maxLength":4}`, `"a\`},
		{`{"type":"string","maxLength":4}`, `"a\u00`},
		{`{"type":"string","maxLength":2}`, "\"a\xe2\x82"},
		{boundedStrings(3, 1), `"`},
		{boundedStrings(5, 2), `"ab`},
		{boundedStrings(4, 40), `"ab\`},
		{`{"anyOf":[{"type":"string","maxLength":6},{"type":"object","additionalProperties":{"type":"integer"}}]}`, `"`},
		{`{"type":"object","properties":{"name":{"type":"string","maxLength":8}},"required":["name"]}`, `{"name":"Jo`},
	} {
		g, err := Compile([]byte(c.schema))
		if err != nil {
			t.Fatal(err)
		}
		m := g.Matcher(v)
		if err := m.Advance([]byte(c.prefix), false); err != nil {
			t.Fatalf("%s after %q: %v", c.schema, c.prefix, err)
		}
		mask := make([]uint64, (v.Size()+63)/64)
		if err := m.Allowed(context.Background(), mask); err != nil {
			t.Fatalf("%s after %q: %v", c.schema, c.prefix, err)
		}
		if want := walkedMask(m); !slices.Equal(mask, want) {
			t.Errorf("%s after %q: the mask differs from the walk's in %d tokens", c.schema, c.prefix, differing(mask, want))
		}
	}
}

func differing(a, b []uint64) int {
	n := 0
	for i := range a {
		for w := a[i] ^ b[i]; w != 0; w &= w - 1 {
			n++
		}
	}
	return n
}

// TestBoundedStringsInTime: 256 strings of distinct maxLengths are 256
// states inside a string; each walked every token (73 ms a state on
// Qwen3's vocabulary), so that four held one token's mask for 0.74 s and
// sixteen passed MaxMaskTime and ended the reply. The tables give it in a
// small part of the bound.
func TestBoundedStringsInTime(t *testing.T) {
	_, v := qwen3(t)
	g, err := Compile([]byte(boundedStrings(MaxAlternatives, 1000)))
	if err != nil {
		t.Fatal(err)
	}
	m := g.Matcher(v)
	if err := m.Advance([]byte(`"Hello`), false); err != nil {
		t.Fatal(err)
	}
	if len(m.states) != MaxAlternatives {
		t.Fatalf("%d states, want %d", len(m.states), MaxAlternatives)
	}
	mask := make([]uint64, (v.Size()+63)/64)
	if err := m.Allowed(context.Background(), mask); err != nil {
		t.Fatal(err)
	}
}
