package sample

import "strings"

// Limits on stop strings, generous next to the OpenAI API's four.
const (
	MaxStops     = 32  // stop strings per request
	MaxStopBytes = 512 // bytes in one stop string
)

// Stopper finds stop strings in generated text that arrives in pieces (one
// decoded token at a time). The zero value has no stop strings and passes
// text through.
type Stopper struct {
	stops   []string
	firsts  string // the first byte of each stop string
	held    string // text that may still become a stop string
	stopped bool
	matched string // the stop string that completed
}

// NewStopper returns a Stopper for the given stop strings. Empty strings are
// ignored; too many or too long ones are an error.
func NewStopper(stops []string) (*Stopper, error) {
	s := &Stopper{}
	for _, st := range stops {
		if st == "" {
			continue
		}
		if len(st) > MaxStopBytes {
			return nil, invalid("a stop string of %d bytes is longer than %d", len(st), MaxStopBytes)
		}
		s.stops = append(s.stops, st)
		if strings.IndexByte(s.firsts, st[0]) < 0 {
			s.firsts += st[:1]
		}
	}
	if len(s.stops) > MaxStops {
		return nil, invalid("%d stop strings, at most %d", len(s.stops), MaxStops)
	}
	return s, nil
}

// Push adds the next piece of text. It returns the text that can be shown
// now and whether a stop string has completed; then the text is what came
// before the stop string, generation should end, and later calls return
// nothing. Of several stop strings, the one that completes first wins (the
// longest of those ending at the same place).
func (s *Stopper) Push(piece string) (string, bool) {
	if s.stopped {
		return "", true
	}
	buf := s.held + piece
	at, end, matched := -1, -1, ""
	for _, st := range s.stops {
		i := strings.Index(buf, st)
		if i < 0 {
			continue
		}
		if e := i + len(st); end < 0 || e < end || (e == end && i < at) {
			at, end, matched = i, e, st
		}
	}
	if at >= 0 {
		s.stopped, s.matched = true, matched
		s.held = ""
		return buf[:at], true
	}
	keep := s.partial(buf)
	s.held = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

// partial returns the length of the longest end of buf that is a proper
// prefix of a stop string.
func (s *Stopper) partial(buf string) int {
	longest := 0
	for _, st := range s.stops {
		longest = max(longest, len(st)-1)
	}
	for j := max(0, len(buf)-longest); j < len(buf); j++ {
		if strings.IndexByte(s.firsts, buf[j]) < 0 {
			continue
		}
		tail := buf[j:]
		for _, st := range s.stops {
			if len(tail) < len(st) && strings.HasPrefix(st, tail) {
				return len(tail)
			}
		}
	}
	return 0
}

// Flush returns the held-back text when generation ends for another reason
// (an eos id or the token limit).
func (s *Stopper) Flush() string {
	out := s.held
	s.held = ""
	return out
}

// Stopped reports whether a stop string has been seen.
func (s *Stopper) Stopped() bool { return s.stopped }

// Matched is the stop string that ended the text ("" before one has): the
// Anthropic API reports it.
func (s *Stopper) Matched() string { return s.matched }
