package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"image/draw"
	"image/png"
)

// icnsElements are the elements of the app's .icns: the OSType of each
// and the side of its PNG in pixels, every size of an iconset that
// iconutil makes (16 to 512 points, at 1x and 2x).
var icnsElements = []struct {
	osType string
	side   int
}{
	{"icp4", 16}, {"ic11", 32}, // 16 pt at 1x, 2x
	{"icp5", 32}, {"ic12", 64}, // 32 pt
	{"ic07", 128}, {"ic13", 256}, // 128 pt
	{"ic08", 256}, {"ic14", 512}, // 256 pt
	{"ic09", 512}, {"ic10", 1024}, // 512 pt
}

// icnsSourceSide is the side the source PNG must have: the largest element's.
const icnsSourceSide = 1024

// makeICNS is the Apple icon image file holding src, a square PNG of
// icnsSourceSide pixels, at each size of icnsElements. The format is a
// header ('icns' and the file's length) and elements (an OSType, the
// element's length including its 8-byte header, and here a PNG), lengths
// big-endian.
func makeICNS(src []byte) ([]byte, error) {
	img, err := png.Decode(bytes.NewReader(src))
	if err != nil {
		return nil, err
	}
	if b := img.Bounds(); b.Dx() != icnsSourceSide || b.Dy() != icnsSourceSide {
		return nil, fmt.Errorf("the icon is %dx%d pixels, not %dx%d", b.Dx(), b.Dy(), icnsSourceSide, icnsSourceSide)
	}
	level := image.NewRGBA(image.Rect(0, 0, icnsSourceSide, icnsSourceSide))
	draw.Draw(level, level.Bounds(), img, img.Bounds().Min, draw.Src)
	pngs := map[int][]byte{}
	for side := icnsSourceSide; side >= icnsElements[0].side; side /= 2 {
		if side < icnsSourceSide {
			level = halve(level)
		}
		var b bytes.Buffer
		if err := png.Encode(&b, level); err != nil {
			return nil, err
		}
		pngs[side] = b.Bytes()
	}
	var body bytes.Buffer
	for _, e := range icnsElements {
		data := pngs[e.side]
		body.WriteString(e.osType)
		body.Write(binary.BigEndian.AppendUint32(nil, uint32(8+len(data))))
		body.Write(data)
	}
	out := append([]byte("icns"), binary.BigEndian.AppendUint32(nil, uint32(8+body.Len()))...)
	return append(out, body.Bytes()...), nil
}

// halve scales a premultiplied image of even side down by two, each pixel
// the mean of the four it covers (a box filter, exact for these halvings).
func halve(src *image.RGBA) *image.RGBA {
	side := src.Bounds().Dx() / 2
	dst := image.NewRGBA(image.Rect(0, 0, side, side))
	for y := range side {
		for x := range side {
			i := src.PixOffset(2*x, 2*y)
			j := i + src.Stride
			o := dst.PixOffset(x, y)
			for c := range 4 {
				sum := int(src.Pix[i+c]) + int(src.Pix[i+4+c]) + int(src.Pix[j+c]) + int(src.Pix[j+4+c])
				dst.Pix[o+c] = uint8((sum + 2) / 4)
			}
		}
	}
	return dst
}
