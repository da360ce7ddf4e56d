package tokenizer

import "unicode/utf8"

// GPT-2's byte-level alphabet gives every byte a printable rune: bytes that
// are printable Latin-1 keep their own code point, the others (controls,
// space, DEL, NBSP, soft hyphen) take 256, 257, ... in byte order. Vocab
// strings are written in this alphabet.
var (
	byteRune [256]rune
	// runeByte maps a rune of the alphabet back to its byte; -1 elsewhere.
	runeByte [byteAlphabetEnd]int16
)

// byteAlphabetEnd is one past the largest rune of the alphabet: 256 plus the
// 68 bytes that are not printable Latin-1.
const byteAlphabetEnd = 256 + 68

func init() {
	for i := range runeByte {
		runeByte[i] = -1
	}
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = next
			next++
		}
		byteRune[b] = r
		runeByte[r] = int16(b)
	}
}

// byteLevelString writes bytes in the byte-level alphabet.
func byteLevelString(b []byte) string {
	out := make([]rune, len(b))
	for i, c := range b {
		out[i] = byteRune[c]
	}
	return string(out)
}

// tokenBytes is what the ByteLevel decoder turns a token into: the bytes its
// runes stand for, or, when any rune is outside the alphabet (added tokens
// such as "<|im_end|>" are not, but others may be), the token's own UTF-8.
func tokenBytes(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		if r < 0 || r >= byteAlphabetEnd || runeByte[r] < 0 {
			return []byte(tok)
		}
		out = append(out, byte(runeByte[r]))
	}
	return out
}

// replacementChar is U+FFFD in UTF-8.
const replacementChar = "\uFFFD"

// appendLossy appends src to dst, replacing each maximal invalid subpart of
// UTF-8 with U+FFFD as Rust's String::from_utf8_lossy does (Go's own
// conversions replace differently). Unless final, an incomplete sequence at
// the end of src that could still become valid is not consumed; n is the
// number of bytes of src consumed.
func appendLossy(dst, src []byte, final bool) (out []byte, n int) {
	i := 0
	for i < len(src) {
		b := src[i]
		if b < utf8.RuneSelf {
			dst = append(dst, b)
			i++
			continue
		}
		size, lo, hi := utf8Lead(b)
		if size == 0 {
			dst = append(dst, replacementChar...)
			i++
			continue
		}
		k := 1
		for k < size && i+k < len(src) {
			c := src[i+k]
			if k == 1 && (c < lo || c > hi) || k > 1 && (c < 0x80 || c > 0xBF) {
				break
			}
			k++
		}
		switch {
		case k == size:
			dst = append(dst, src[i:i+size]...)
		case i+k == len(src) && !final:
			return dst, i
		default:
			dst = append(dst, replacementChar...)
		}
		i += k
	}
	return dst, i
}

// utf8Lead gives the length of the sequence a lead byte starts and the
// range of its second byte (Unicode table 3-7); size 0 for a byte that
// cannot start a sequence.
func utf8Lead(b byte) (size int, lo, hi byte) {
	switch {
	case b >= 0xC2 && b <= 0xDF:
		return 2, 0x80, 0xBF
	case b == 0xE0:
		return 3, 0xA0, 0xBF
	case b == 0xED:
		return 3, 0x80, 0x9F
	case b >= 0xE1 && b <= 0xEF:
		return 3, 0x80, 0xBF
	case b == 0xF0:
		return 4, 0x90, 0xBF
	case b >= 0xF1 && b <= 0xF3:
		return 4, 0x80, 0xBF
	case b == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}
