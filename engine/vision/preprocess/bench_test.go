package preprocess

import (
	"fmt"
	"image"
	"testing"
)

// BenchmarkPreprocess times Preprocess at Qwen3.6's configuration: the
// issue's 1024x768 (resized to 1024x768, 768 tokens) and a 12-megapixel
// phone photo (4032x3024 to 4032x3008, 11,844 tokens).
func BenchmarkPreprocess(b *testing.B) {
	for _, size := range [][2]int{{1024, 768}, {4032, 3024}} {
		img := image.NewYCbCr(image.Rect(0, 0, size[0], size[1]), image.YCbCrSubsampleRatio420)
		for i := range img.Y {
			img.Y[i] = uint8(i * 7)
		}
		b.Run(fmt.Sprintf("size=%dx%d", size[0], size[1]), func(b *testing.B) {
			b.SetBytes(int64(size[0] * size[1] * 3))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Preprocess(img, DefaultConfig()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
