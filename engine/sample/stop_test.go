package sample

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// pushAll feeds pieces and returns everything emitted and whether it stopped.
func pushAll(t *testing.T, s *Stopper, pieces []string) (string, bool) {
	t.Helper()
	var out strings.Builder
	stopped := false
	for _, p := range pieces {
		text, stop := s.Push(p)
		out.WriteString(text)
		if stop {
			stopped = true
			break
		}
	}
	if !stopped {
		out.WriteString(s.Flush())
	}
	return out.String(), stopped
}

func TestStopper(t *testing.T) {
	cases := []struct {
		name    string
		stops   []string
		pieces  []string
		want    string
		stopped bool
	}{
		{"spans tokens", []string{"###"}, []string{"answer #", "#", "# more"}, "answer ", true},
		{"never emitted", []string{"STOP"}, []string{"STOP"}, "", true},
		{"near miss released", []string{"</end>"}, []string{"a </en", "x> b"}, "a </enx> b", false},
		{"held at the end, flushed", []string{"</end>"}, []string{"tail </e"}, "tail </e", false},
		{"first to complete wins", []string{"abcd", "bc"}, []string{"a", "b", "c", "d"}, "a", true},
		{"first to complete wins, whole", []string{"abcd", "bc"}, []string{"abcd"}, "a", true},
		{"longest of those ending together", []string{"c", "abc"}, []string{"xabc"}, "x", true},
		{"multibyte", []string{"。\n"}, []string{"完成", "。", "\n后面"}, "完成", true},
		{"empty stop ignored", []string{""}, []string{"text"}, "text", false},
		{"no stops", nil, []string{"a", "b"}, "ab", false},
		{"overlapping prefix", []string{"aab"}, []string{"aaa", "ab"}, "aa", true},
	}
	for _, c := range cases {
		s, err := NewStopper(c.stops)
		if err != nil {
			t.Fatal(err)
		}
		got, stopped := pushAll(t, s, c.pieces)
		if got != c.want || stopped != c.stopped || s.Stopped() != c.stopped {
			t.Errorf("%s: got %q stopped=%v, want %q stopped=%v", c.name, got, stopped, c.want, c.stopped)
		}
	}
}

func TestStopperMatched(t *testing.T) {
	for _, c := range []struct {
		stops  []string
		pieces []string
		want   string
	}{
		{[]string{"abcd", "bc"}, []string{"a", "b", "c", "d"}, "bc"},
		{[]string{"c", "abc"}, []string{"xabc"}, "abc"},
		{[]string{"END", "###"}, []string{"text #", "##"}, "###"},
		{[]string{"END"}, []string{"no stop here"}, ""},
	} {
		s, err := NewStopper(c.stops)
		if err != nil {
			t.Fatal(err)
		}
		pushAll(t, s, c.pieces)
		if s.Matched() != c.want {
			t.Errorf("%q over %q: matched %q, want %q", c.stops, c.pieces, s.Matched(), c.want)
		}
	}
}

// TestStopperHoldsBackOnlyPrefixes checks that text is released as soon as
// it cannot be part of a stop string.
func TestStopperHoldsBackOnlyPrefixes(t *testing.T) {
	s, err := NewStopper([]string{"<|user|>", "\n\n\n"})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct{ in, out string }{
		{"Hello", "Hello"},
		{" <|us", " "},
		{"x", "<|usx"},
		{"\n\n", ""},
		{"ok", "\n\nok"},
	}
	for _, st := range steps {
		if got, stop := s.Push(st.in); got != st.out || stop {
			t.Fatalf("Push(%q) = %q, %v; want %q", st.in, got, stop, st.out)
		}
	}
	if _, stop := s.Push("\n\n\nafter"); !stop {
		t.Fatal("three newlines did not stop")
	}
	if got, stop := s.Push("more"); got != "" || !stop {
		t.Fatalf("after stopping: %q, %v", got, stop)
	}
}

// TestStopperSplitInvariance: however the text is cut into pieces, the
// emitted text and the stop are the same as for the whole text.
func TestStopperSplitInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	alphabet := []string{"a", "b", "c", "<", "/", ">", "\n", "é", "字"}
	stops := []string{"abc", "</b>", "\n\n", "ca", "字字é"}
	for range 3000 {
		var b strings.Builder
		for range r.IntN(30) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		text := b.String()
		chosen := stops[:1+r.IntN(len(stops))]
		whole, err := NewStopper(chosen)
		if err != nil {
			t.Fatal(err)
		}
		want, wantStop := pushAll(t, whole, []string{text})
		var pieces []string
		for rest := text; rest != ""; {
			n := min(len(rest), 1+r.IntN(4))
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		split, err := NewStopper(chosen)
		if err != nil {
			t.Fatal(err)
		}
		got, gotStop := pushAll(t, split, pieces)
		if got != want || gotStop != wantStop {
			t.Fatalf("text %q stops %q pieces %q: got %q %v, whole %q %v", text, chosen, pieces, got, gotStop, want, wantStop)
		}
		for _, st := range chosen {
			if strings.Contains(got, st) {
				t.Fatalf("text %q: emitted %q contains stop %q", text, got, st)
			}
		}
	}
}

func TestStopperLimits(t *testing.T) {
	if _, err := NewStopper([]string{strings.Repeat("x", MaxStopBytes+1)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("long stop: %v", err)
	}
	many := make([]string, MaxStops+1)
	for i := range many {
		many[i] = strings.Repeat("y", i+1)
	}
	if _, err := NewStopper(many); !errors.Is(err, ErrInvalid) {
		t.Errorf("too many stops: %v", err)
	}
	var zero Stopper
	if got, stop := zero.Push("free"); got != "free" || stop {
		t.Errorf("zero Stopper: %q %v", got, stop)
	}
}
