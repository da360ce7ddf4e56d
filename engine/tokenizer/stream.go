package tokenizer

// StreamDecoder turns ids into text one at a time, for streaming output.
// Each piece it returns is valid UTF-8: the bytes of a character split
// across tokens are held back until its last byte arrives, so the pieces
// returned by Next and Flush always add up to Decode (or
// DecodeSkipSpecial) of all the ids. A StreamDecoder is not safe for
// concurrent use.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	// pending is an incomplete UTF-8 sequence (at most 3 bytes) followed
	// by the bytes of the latest token until they are decoded.
	pending []byte
	out     []byte
}

// NewStreamDecoder starts decoding a new sequence of ids; with skipSpecial,
// special tokens produce no text.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Next adds one id and returns the text it completes, which may be empty.
func (d *StreamDecoder) Next(id int) string {
	b, ok := d.t.tokenBytes(id, d.skipSpecial)
	if !ok {
		return ""
	}
	d.pending = append(d.pending, b...)
	return d.emit(false)
}

// Flush ends the sequence: a character still incomplete becomes U+FFFD.
// The decoder is then ready for a new sequence.
func (d *StreamDecoder) Flush() string { return d.emit(true) }

func (d *StreamDecoder) emit(final bool) string {
	var n int
	d.out, n = appendLossy(d.out[:0], d.pending, final)
	d.pending = d.pending[:copy(d.pending, d.pending[n:])]
	return string(d.out)
}
