package reply

import (
	"strings"
	"testing"
)

// benchReply is a long reply: reasoning, then a call writing a large file
// full of the characters the parser must look at ('<' and newlines).
func benchReply() string {
	line := "\tif a < b && c > d { return x }\n"
	return "Let me write the file.\n</think>\n\nWriting it now.\n\n<tool_call>\n<function=write_file>\n" +
		"<parameter=path>\nmain.go\n</parameter>\n<parameter=content>\n" + strings.Repeat(line, 4000) +
		"</parameter>\n</function>\n</tool_call>"
}

func BenchmarkParse(b *testing.B) {
	text := benchReply()
	opts := Options{Thinking: true, NewID: testID}
	b.Run("split=whole", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Parse(text, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("split=4bytes", func(b *testing.B) {
		// About one token per feed, as in generation.
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			p, err := New(opts)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < len(text); i += 4 {
				p.Feed(text[i:min(i+4, len(text))])
			}
			p.Close()
		}
	})
}
