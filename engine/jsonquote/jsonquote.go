// Package jsonquote writes a JSON string the way the writers Petal must
// match byte for byte write it: nlohmann::json's dump with its defaults
// (MLX's safetensors headers) and Python's json.dumps with
// ensure_ascii=False (chat templates' tojson). Both escape only the quote,
// the backslash and control characters below 0x20 (the short forms where
// JSON has them, \u00xx in lowercase hex otherwise) and keep every other
// byte as it is, which encoding/json does not (it escapes <, >, & and
// U+2028/9 and replaces invalid UTF-8).
package jsonquote

import (
	"fmt"
	"strings"
)

// Write writes s quoted to b.
func Write(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

// String returns s quoted.
func String(s string) string {
	var b strings.Builder
	Write(&b, s)
	return b.String()
}
