package preprocess

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"testing"
)

// rgbAt reads one pixel as Preprocess reads it.
func rgbAt(img image.Image, x, y int) [3]uint8 {
	row := make([]uint8, img.Bounds().Dx()*3)
	rgbRows(img)(y, row)
	return [3]uint8(row[x*3 : x*3+3])
}

// TestGIFTransparentIndex: a GIF's first frame, smaller than its screen
// and with a transparent index, opens as PIL opens it: screen-sized, the
// uncovered screen and the transparent pixels the transparent index, read
// as the colour table's entry for it (Go's decoder zeroes it; PIL's
// convert("RGB") keeps it).
func TestGIFTransparentIndex(t *testing.T) {
	keyed := color.RGBA{10, 200, 30, 0} // the table's colour for the transparent index
	pal := color.Palette{color.RGBA{255, 0, 0, 255}, keyed, color.RGBA{0, 0, 255, 255}}
	frame := image.NewPaletted(image.Rect(2, 1, 6, 4), pal)
	frame.SetColorIndex(3, 2, 1) // transparent inside the frame
	frame.SetColorIndex(4, 2, 2)
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, &gif.GIF{Image: []*image.Paletted{frame}, Delay: []int{0}, Config: image.Config{Width: 8, Height: 6, ColorModel: pal}}); err != nil {
		t.Fatal(err)
	}
	img, err := Decode(b.Bytes(), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, 8, 6) {
		t.Fatalf("bounds %v, want the 8x6 screen", img.Bounds())
	}
	for _, c := range []struct {
		x, y int
		want [3]uint8
	}{{0, 0, [3]uint8{10, 200, 30}}, {3, 2, [3]uint8{10, 200, 30}}, {4, 2, [3]uint8{0, 0, 255}}, {2, 1, [3]uint8{255, 0, 0}}} {
		if got := rgbAt(img, c.x, c.y); got != c.want {
			t.Errorf("(%d, %d): %v, want %v", c.x, c.y, got, c.want)
		}
	}
}

// TestSixteenBitPNG: PIL reads a 16-bit colour PNG's high bytes, and clips
// a 16-bit grayscale one ("I;16") to 255 instead of scaling it.
func TestSixteenBitPNG(t *testing.T) {
	rgba := image.NewNRGBA64(image.Rect(0, 0, 2, 1))
	rgba.SetNRGBA64(0, 0, color.NRGBA64{0x12ff, 0x3400, 0xfe01, 0x8000})
	rgba.SetNRGBA64(1, 0, color.NRGBA64{0x0001, 0xffff, 0x7f80, 0xffff})
	gray := image.NewGray16(image.Rect(0, 0, 3, 1))
	for i, v := range []uint16{200, 255, 300} {
		gray.SetGray16(i, 0, color.Gray16{v})
	}
	opaque := image.NewRGBA64(image.Rect(0, 0, 1, 1))
	opaque.SetRGBA64(0, 0, color.RGBA64{0xabcd, 0x0102, 0xff00, 0xffff})
	for _, c := range []struct {
		name string
		img  image.Image
		want [][3]uint8
	}{
		{"RGBA", rgba, [][3]uint8{{0x12, 0x34, 0xfe}, {0x00, 0xff, 0x7f}}},
		{"gray", gray, [][3]uint8{{200, 200, 200}, {255, 255, 255}, {255, 255, 255}}},
		{"RGB", opaque, [][3]uint8{{0xab, 0x01, 0xff}}},
	} {
		var b bytes.Buffer
		if err := png.Encode(&b, c.img); err != nil {
			t.Fatal(err)
		}
		img, err := Decode(b.Bytes(), DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		for x, want := range c.want {
			if got := rgbAt(img, x, 0); got != want {
				t.Errorf("%s (%T) pixel %d: %v, want %v", c.name, img, x, got, want)
			}
		}
	}
}
