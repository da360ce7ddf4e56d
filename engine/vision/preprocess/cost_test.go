package preprocess

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"testing"
)

// riff wraps chunks (id, body) as a WebP file, each body padded to even.
func riff(chunks ...any) []byte {
	var body bytes.Buffer
	body.WriteString("WEBP")
	for i := 0; i < len(chunks); i += 2 {
		b := chunks[i+1].([]byte)
		body.WriteString(chunks[i].(string))
		binary.Write(&body, binary.LittleEndian, uint32(len(b)))
		body.Write(b)
		if len(b)%2 == 1 {
			body.WriteByte(0)
		}
	}
	var f bytes.Buffer
	f.WriteString("RIFF")
	binary.Write(&f, binary.LittleEndian, uint32(body.Len()))
	f.Write(body.Bytes())
	return f.Bytes()
}

// vp8x is a VP8X chunk's body declaring a w x h canvas.
func vp8x(w, h int) []byte {
	b := make([]byte, 10)
	b[4], b[5], b[6] = byte(w-1), byte((w-1)>>8), byte((w-1)>>16)
	b[7], b[8], b[9] = byte(h-1), byte((h-1)>>8), byte((h-1)>>16)
	return b
}

// vp8lUniform is a VP8L bitstream of w x h whose every pixel costs no bits:
// no transform, no colour cache, no meta codes, and five simple Huffman
// codes of one symbol each (zero bits a symbol).
func vp8lUniform(w, h int) []byte {
	var bits uint64
	var n uint
	put := func(v uint64, k uint) { bits |= v << n; n += k }
	put(uint64(w-1), 14)
	put(uint64(h-1), 14)
	put(0, 1) // alpha hint
	put(0, 3) // version
	put(0, 1) // no transform
	put(0, 1) // no colour cache
	put(0, 1) // no meta Huffman codes
	for range 5 {
		put(1, 1) // simple code
		put(0, 1) // one symbol
		put(0, 1) // of 1 bit
		put(0, 1) // symbol 0
	}
	out := []byte{0x2f}
	for range (n + 7) / 8 {
		out = append(out, byte(bits))
		bits >>= 8
	}
	return out
}

// vp8Header is a VP8 key frame's first ten bytes for w x h, enough for
// DecodeConfig and the size check.
func vp8Header(w, h int) []byte {
	return []byte{0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, byte(w), byte(w >> 8), byte(h), byte(h >> 8)}
}

// TestDecodeRefusesWebPBitstreamPastCanvas: a VP8X canvas of 1x1 over a
// bitstream of 16384x16384 (46 bytes; x/image decodes the bitstream at its
// own size, a GiB) is refused from the bitstream's header, lossless or
// lossy; the same bitstream at a size within the limits decodes.
func TestDecodeRefusesWebPBitstreamPastCanvas(t *testing.T) {
	cases := map[string][]byte{
		"VP8L 16384² in a 1x1 canvas": riff("VP8X", vp8x(1, 1), "VP8L", vp8lUniform(16384, 16384)),
		"VP8L 2x2 in a 1x1 canvas":    riff("VP8X", vp8x(1, 1), "VP8L", vp8lUniform(2, 2)),
		"VP8 16383² in a 1x1 canvas":  riff("VP8X", vp8x(1, 1), "VP8 ", vp8Header(16383, 16383)),
		"VP8L 8192² plain":            riff("VP8L", vp8lUniform(8192, 8192)),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			took, alloc, err := measure(func() error {
				_, err := Decode(data, DefaultLimits())
				return err
			})
			checkRefused(t, err, took, alloc, "")
		})
	}
	img, err := Decode(riff("VP8X", vp8x(40, 30), "VP8L", vp8lUniform(40, 30)), DefaultLimits())
	if err != nil || img.Bounds() != image.Rect(0, 0, 40, 30) {
		t.Fatalf("40x30 in a 40x30 canvas: %v, %v", img, err)
	}
}

// sofJPEG is an SOI, a frame header (SOF2 when progressive, SOF0
// otherwise) of w x h with the components' sampling factors, a first scan
// header over every component, and an EOI: image/jpeg allocates the image
// and, for SOF2, every block's coefficients at the scan header.
func sofJPEG(progressive bool, w, h int, sampling ...byte) []byte {
	marker := byte(0xc0)
	if progressive {
		marker = 0xc2
	}
	n := len(sampling)
	sof := []byte{0xff, marker, 0, byte(8 + 3*n), 8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(n)}
	sos := []byte{0xff, 0xda, 0, byte(6 + 2*n), byte(n)}
	for i, s := range sampling {
		sof = append(sof, byte(i+1), s, 0)
		sos = append(sos, byte(i+1), 0)
	}
	sos = append(sos, 0, 0, 0) // Ss, Se, Ah/Al: the DC scan
	out := append([]byte{0xff, 0xd8}, sof...)
	out = append(out, sos...)
	return append(out, 0xff, 0xd9)
}

// TestDecodeRefusesProgressiveJPEGCost: a progressive JPEG of 16384x2048
// (Go's decoder keeps 256 bytes of coefficients per 8x8 block of each
// component: 503 MB at 4:4:4 from a file of 40 bytes) is refused from its
// frame header, so are a 4:2:0 one and a baseline 4-component one past the
// bound; a baseline 4:2:0 one of the same size is not refused for its
// cost (its scan is empty, so the decoder refuses it).
func TestDecodeRefusesProgressiveJPEGCost(t *testing.T) {
	for name, data := range map[string][]byte{
		"progressive 4:4:4 16384x2048": sofJPEG(true, 16384, 2048, 0x11, 0x11, 0x11),
		"progressive 4:2:0 16384x2048": sofJPEG(true, 16384, 2048, 0x22, 0x11, 0x11),
		"progressive gray 16384x2048":  sofJPEG(true, 16384, 2048, 0x11),
		"baseline CMYK 16384x2048":     sofJPEG(false, 16384, 2048, 0x11, 0x11, 0x11, 0x11),
	} {
		t.Run(name, func(t *testing.T) {
			took, alloc, err := measure(func() error {
				_, err := Decode(data, DefaultLimits())
				return err
			})
			checkRefused(t, err, took, alloc, "MaxDecodedBytes")
		})
	}
	var le *LimitError
	if _, err := Decode(sofJPEG(false, 16384, 2048, 0x22, 0x11, 0x11), DefaultLimits()); err == nil || errors.As(err, &le) {
		t.Fatalf("baseline 4:2:0 16384x2048: %v, want the decoder's refusal, not a limit", err)
	}
}

// TestJPEGCostCoversDecoder: the counted cost bounds what image/jpeg
// allocates decoding real files (baseline 4:2:0 and gray, Go's encoder).
func TestJPEGCostCoversDecoder(t *testing.T) {
	for _, img := range []image.Image{
		image.NewRGBA(image.Rect(0, 0, 1001, 603)),
		image.NewGray(image.Rect(0, 0, 999, 1001)),
	} {
		var b bytes.Buffer
		if err := jpeg.Encode(&b, img, nil); err != nil {
			t.Fatal(err)
		}
		cfg, err := decodeConfig("jpeg", b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		cost, err := decodeCost("jpeg", b.Bytes(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, alloc, err := measure(func() error { _, err := jpeg.Decode(bytes.NewReader(b.Bytes())); return err })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v: counted %d, allocated %d", img.Bounds(), cost, alloc)
		if uint64(cost) < alloc*9/10 || uint64(cost) > alloc*2 {
			t.Fatalf("%v: counted %d bytes, the decoder allocated %d", img.Bounds(), cost, alloc)
		}
	}
}

// TestProbeShapeMatchPreprocess: what Probe and Shape give from the headers
// is what Decode and Preprocess make of each file (the values aside), and
// Probe refuses the hostile files Decode refuses, without decoding.
func TestProbeShapeMatchPreprocess(t *testing.T) {
	cfg := DefaultConfig()
	for _, name := range []string{"down.png", "photo.jpg", "anim.gif", "lossy.webp", "lossless.webp", "alpha.png"} {
		data := readFile(t, name)
		w, h, err := Probe(data, DefaultLimits())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		shape, err := Shape(h, w, cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		img, err := Decode(data, DefaultLimits())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		px, err := Preprocess(img, cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if shape.Values != nil || len(px.Values) != px.Grid.Patches()*px.PatchDim {
			t.Errorf("%s: Shape has %d values, Preprocess %d for %v", name, len(shape.Values), len(px.Values), px.Grid)
		}
		shape.Values = px.Values
		if fmt.Sprint(shape) != fmt.Sprint(px) {
			t.Errorf("%s: Shape %+v, Preprocess %+v", name, shape.Grid, px.Grid)
		}
	}
	for name, data := range map[string][]byte{
		"VP8L past its canvas":  riff("VP8X", vp8x(1, 1), "VP8L", vp8lUniform(16384, 16384)),
		"progressive 4:4:4":     sofJPEG(true, 16384, 2048, 0x11, 0x11, 0x11),
		"10k-frame GIF":         gifFrames(10000),
		"lying PNG over a byte": pngFile(8000, 4000, 8, 2, []byte{0}),
	} {
		took, alloc, err := measure(func() error { _, _, err := Probe(data, DefaultLimits()); return err })
		checkRefused(t, err, took, alloc, "")
		if _, err2 := Decode(data, DefaultLimits()); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("%s: Probe %v, Decode %v", name, err, err2)
		}
	}
}
