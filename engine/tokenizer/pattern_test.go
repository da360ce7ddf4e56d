package tokenizer

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Split regexes of other byte-level BPE tokenizers, beyond the two Qwen ones
// the golden test covers. The expected splits were produced by Python's
// regex module, which agreed with the tokenizers library on all 3000
// random strings of the golden file.
const (
	gpt2Regex   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	llama3Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

func TestPatternOtherTokenizers(t *testing.T) {
	cases := []struct {
		regex, text string
		want        []string
	}{
		{gpt2Regex, "I'LL see you're 12345 items!!\n\n  ok   ",
			[]string{"I", "'", "LL", " see", " you", "'re", " 12345", " items", "!!", "\n\n ", " ok", "   "}},
		{gpt2Regex, "x\t\t\ny  z\u00a0\u00a0w 2026年 don'T",
			[]string{"x", "\t\t", "\n", "y", " ", " z", "\u00a0", "\u00a0", "w", " 2026", "年", " don", "'", "T"}},
		{gpt2Regex, "'S's  'Ré", []string{"'", "S", "'s", " ", " '", "Ré"}},
		{llama3Regex, "I'LL see you're 12345 items!!\n\n  ok   ",
			[]string{"I", "'LL", " see", " you", "'re", " ", "123", "45", " items", "!!\n\n", " ", " ok", "   "}},
		{llama3Regex, "x\t\t\ny  z\u00a0\u00a0w 2026年 don'T",
			[]string{"x", "\t\t\n", "y", " ", " z", "\u00a0", "\u00a0w", " ", "202", "6", "年", " don", "'T"}},
		{llama3Regex, "'S's  'Ré", []string{"'S", "'s", " ", " '", "Ré"}},
	}
	for _, c := range cases {
		p, err := compilePattern(c.regex)
		if err != nil {
			t.Fatalf("compilePattern(%q): %v", c.regex, err)
		}
		if got := splitAll(p, c.text); !slices.Equal(got, c.want) {
			t.Errorf("split %q with %q:\n got %q\nwant %q", c.text, c.regex, got, c.want)
		}
	}
}

func TestPatternRejectsWhatItDoesNotKnow(t *testing.T) {
	cases := []struct{ regex, why string }{
		{`(ab)+`, "groups other than"},
		{`(?i:a+)|b`, "is not a literal"},
		{`(?i:ab)c`, "whole alternative"},
		{`a+?`, "lazy and possessive"},
		{`a++`, "lazy and possessive"},
		{`\d+`, `\d is not a literal`},
		{`\w+`, `\w is not a literal`},
		{`\bx`, `\b is not a literal`},
		{`a.b`, `'.' is not a literal`},
		{`^a`, `'^' is not a literal`},
		{`(?=x)a`, "groups other than"},
		{`(?<!x)a`, "groups other than"},
		{`\s+(?!\S)x`, "look-ahead must end"},
		{`a|`, "empty alternative"},
		{`x*|y`, "can match the empty string"},
		{`[[:alpha:]]`, "nested or POSIX"},
		{`[]`, "empty character class"},
		{`[a`, "unclosed character class"},
		{`[z-a]`, "reversed"},
		{`\p{Foo}`, "unknown Unicode category"},
		{`\p{L`, `unclosed \p{`},
		{`a{2000}`, "too large"},
		{`a{3,1}`, "bad or too large maximum"},
		{`a{`, "unclosed {"},
		{`+a`, "without an operand"},
		{`a)`, "unbalanced ')'"},
		{`\`, "trailing backslash"},
		{strings.Repeat("a|", maxAlternatives) + "a", "more than 64 alternatives"},
		{strings.Repeat("a", maxItems+1), "more than 16 items"},
		{strings.Repeat("a", maxPatternBytes+1), "split regex of"},
	}
	for _, c := range cases {
		_, err := compilePattern(c.regex)
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("compilePattern(%q) = %v, want an ErrUnsupported error", c.regex, err)
			continue
		}
		if !strings.Contains(err.Error(), c.why) {
			t.Errorf("compilePattern(%q) error %q does not say %q", c.regex, err, c.why)
		}
	}
}

// FuzzPattern checks that any regex either compiles or is rejected, that a
// compiled one cuts any text into non-empty pieces that add up to it, and
// that memoized backtracking splits exactly as plain backtracking does.
func FuzzPattern(f *testing.F) {
	f.Add(gpt2Regex, "I'LL see you're 12345 items!!\n\n  ok   ")
	f.Add(llama3Regex, "x\t\t\ny  z\u00a0\u00a0w 2026年 don'T")
	f.Add(`[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\s+(?!\S)|\s+`, "e\u0301 \xff\xfe  x")
	f.Add(`a{1,3}b?|[\-a-c\]]+`, "aaaab-]c")
	f.Add(`a*a*a*a*a*a*a*a*a*a*a*a*b|a`, strings.Repeat("a", 200))
	f.Fuzz(func(t *testing.T, regex, text string) {
		p, err := compilePattern(regex)
		if err != nil {
			if !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrBadTokenizer) {
				t.Fatalf("unmarked error %v", err)
			}
			return
		}
		pieces := splitAll(p, text)
		memo := *p
		memo.memoAfter = 0
		if got := splitAll(&memo, text); !slices.Equal(got, pieces) {
			t.Fatalf("split %q with %q: memoized %q, plain %q", text, regex, got, pieces)
		}
		var sb strings.Builder
		for _, piece := range pieces {
			if piece == "" {
				t.Fatalf("empty piece splitting %q with %q", text, regex)
			}
			sb.WriteString(piece)
		}
		if sb.String() != text {
			t.Fatalf("pieces of %q add up to %q", text, sb.String())
		}
	})
}
