package menubar

import (
	"bytes"
	"fmt"
	"image/png"
)

// IconPoints is the side of a menu-bar icon in points; the menu bar is 22
// points high and Apple's guidance is an 18-point glyph.
const IconPoints = 18

// MaxIconBytes bounds an icon's PNG; a template glyph is well under it.
const MaxIconBytes = 64 << 10

// CheckIcon reports whether png is an icon the menu bar can show as a
// template image: a square PNG of at most MaxIconBytes, IconPoints or a
// multiple of it on a side (the @2x pixels of a Retina bar), black with
// alpha only, since macOS draws a template's alpha in the bar's own colour
// (dark or light, highlighted or not) and ignores the rest.
func CheckIcon(data []byte) error {
	if len(data) == 0 || len(data) > MaxIconBytes {
		return fmt.Errorf("menubar: an icon is a PNG of 1 to %d bytes, not %d", MaxIconBytes, len(data))
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("menubar: the icon is not a PNG: %w", err)
	}
	b := img.Bounds()
	if b.Dx() != b.Dy() || b.Dx()%IconPoints != 0 {
		return fmt.Errorf("menubar: the icon is %dx%d pixels; it must be square, a multiple of %d", b.Dx(), b.Dy(), IconPoints)
	}
	opaque := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			if a != 0 && (r|g|bl) != 0 {
				return fmt.Errorf("menubar: the icon's pixel (%d,%d) is not black: a template icon is black and alpha only", x, y)
			}
			if a != 0 {
				opaque++
			}
		}
	}
	if opaque == 0 {
		return fmt.Errorf("menubar: the icon is fully transparent")
	}
	return nil
}
