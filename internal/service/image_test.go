package service

import (
	"slices"
	"testing"

	"petal/engine/vision/preprocess"
)

// TestCacheKeyHoldsImageHashes: prompts with equal tokens share a key
// only where their images' hashes are equal; a prefix ending inside an
// image is not reused, and a hit hands on the images past it alone.
func TestCacheKeyHoldsImageHashes(t *testing.T) {
	const pad = 9
	tokens := []int{1, 2, pad, pad, pad, pad, 3, pad, pad, pad, pad, 4}
	px := preprocess.Pixels{Grid: preprocess.Grid{T: 1, H: 4, W: 4}, Merge: 2}
	span := func(start int, h byte) ImageSpan {
		return ImageSpan{Start: start, Image: Image{Pixels: px, Hash: [32]byte{h, 1, 2, 3, 4, 5, 6, 7}}}
	}
	a := cacheKey(tokens, []ImageSpan{span(2, 1), span(7, 2)})
	b := cacheKey(tokens, []ImageSpan{span(2, 1), span(7, 3)})
	c := cacheKey(tokens, []ImageSpan{span(2, 4), span(7, 2)})
	if !slices.Equal(a[:7], b[:7]) || slices.Equal(a[:8], b[:8]) || slices.Equal(a[:3], c[:3]) {
		t.Errorf("keys\n%v\n%v\n%v", a, b, c)
	}
	if !slices.Equal(a[:2], tokens[:2]) || a[6] != 3 || !isImageKey(a[2]) || a[2] == a[7] || !slices.Equal(cacheKey(tokens, nil), tokens) {
		t.Errorf("key %v of %v", a, tokens)
	}
	spans := []ImageSpan{span(2, 1), span(7, 2)}
	for n, inside := range map[int]bool{2: false, 3: true, 5: true, 6: false, 7: false, 8: true, 11: false} {
		if insideImage(n, spans) != inside {
			t.Errorf("insideImage(%d) = %v", n, !inside)
		}
	}
	if got := imagesFrom(spans, 6); len(got) != 1 || got[0].Start != 7 {
		t.Errorf("imagesFrom(6) = %v", got)
	}
	if got := imagesFrom(spans, 11); got != nil {
		t.Errorf("imagesFrom(11) = %v", got)
	}
}
