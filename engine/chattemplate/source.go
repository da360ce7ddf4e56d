package chattemplate

import (
	"fmt"
	"strings"
)

// MaxTagCode bounds the code in one tag outside string literals; the
// longest in real templates is a few hundred bytes. Together with
// MaxNesting it keeps the parser's recursion shallow.
const MaxTagCode = 8 << 10

// blockOpeners are the statements that open a block closed by end<name>.
var blockOpeners = map[string]bool{
	"if": true, "for": true, "macro": true, "call": true, "filter": true, "with": true,
	"autoescape": true, "raw": true, "generation": true, "block": true,
}

// checkSource bounds nesting before the parser sees the source: brackets
// inside tags, blocks, and the size of each tag's code.
func checkSource(src string) error {
	blocks := 0
	for i := 0; i < len(src); {
		open := strings.Index(src[i:], "{")
		if open < 0 || i+open+1 >= len(src) {
			break
		}
		i += open
		var closer string
		switch src[i+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			end := strings.Index(src[i+2:], "#}")
			if end < 0 {
				return nil
			}
			i += end + 4
			continue
		default:
			i++
			continue
		}
		j, brackets, code := i+2, 0, 0
		var quote byte
		for ; j < len(src); j++ {
			c := src[j]
			if quote != 0 {
				if c == '\\' {
					j++
				} else if c == quote {
					quote = 0
				}
				continue
			}
			if strings.HasPrefix(src[j:], closer) {
				break
			}
			code++
			switch c {
			case '\'', '"':
				quote = c
			case '(', '[', '{':
				brackets++
				if brackets > MaxNesting {
					return fmt.Errorf("%w: brackets nested deeper than %d", ErrBadTemplate, MaxNesting)
				}
			case ')', ']', '}':
				brackets--
			}
		}
		if code > MaxTagCode {
			return fmt.Errorf("%w: a tag with more than %d bytes of code", ErrBadTemplate, MaxTagCode)
		}
		if closer == "%}" {
			word := strings.Fields(strings.TrimLeft(src[i+2:min(j, len(src))], "-+ \t\r\n"))
			if len(word) > 0 {
				switch {
				case blockOpeners[word[0]] || word[0] == "set" && !strings.Contains(src[i:j], "="):
					blocks++
					if blocks > MaxNesting {
						return fmt.Errorf("%w: blocks nested deeper than %d", ErrBadTemplate, MaxNesting)
					}
				case strings.HasPrefix(word[0], "end"):
					blocks--
				}
			}
		}
		i = j + 2
	}
	return nil
}
