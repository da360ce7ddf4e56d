package menubar

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
)

func encode(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// glyph is a side x side icon with one pixel set to c.
func glyph(t *testing.T, side int, c color.NRGBA) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, side, side))
	img.SetNRGBA(side/2, side/2, c)
	return encode(t, img)
}

func TestCheckIcon(t *testing.T) {
	black := color.NRGBA{A: 200}
	if err := CheckIcon(glyph(t, 2*IconPoints, black)); err != nil {
		t.Errorf("a black @2x glyph: %v", err)
	}
	if err := CheckIcon(glyph(t, IconPoints, black)); err != nil {
		t.Errorf("a black @1x glyph: %v", err)
	}
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"empty", "1 to", nil},
		{"too big", "1 to", make([]byte, MaxIconBytes+1)},
		{"not a PNG", "not a PNG", []byte("GIF89a")},
		{"not square", "must be square", encode(t, image.NewNRGBA(image.Rect(0, 0, 36, 18)))},
		{"odd size", "multiple of", glyph(t, 20, black)},
		{"coloured", "not black", glyph(t, 36, color.NRGBA{R: 255, A: 255})},
		{"transparent", "fully transparent", glyph(t, 36, color.NRGBA{})},
	} {
		err := CheckIcon(tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
