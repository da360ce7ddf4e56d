package tokenizer

import "testing"

// BenchmarkEncode measures encoding of the long document of the golden
// texts with the Qwen3 tokenizer: cache=warm as in a server (the word cache
// filled by earlier calls), cache=cold with the cache emptied before each
// call.
func BenchmarkEncode(b *testing.B) {
	_, texts, toks := loadFixtures(b)
	tok := toks["qwen3"]
	text := texts["long_document"]
	b.Run("cache=warm", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		ids := tok.AppendEncode(nil, text)
		for b.Loop() {
			ids = tok.AppendEncode(ids[:0], text)
		}
		b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	})
	b.Run("cache=cold", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			tok.cache.words.Clear()
			tok.cache.count.Store(0)
			tok.Encode(text)
		}
	})
}
