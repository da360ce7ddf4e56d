package preprocess

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
)

// What Go's decoders allocate, per pixel or per 8x8 block, beyond the
// image they return: the header's colour model alone undercounts a
// progressive JPEG by five times and a lossless WebP by two.
const (
	// jpegBlockBytes is one 8x8 block of a component's samples.
	jpegBlockBytes = 64
	// jpegCoeffBytes is one block's coefficients, 64 int32, which the
	// progressive decoder keeps for every block of every component until
	// its last scan.
	jpegCoeffBytes = 64 * 4
	// jpegOutBytes is a pixel of the RGBA or CMYK image a 4-component (or
	// an RGB) JPEG is converted into after its planes are decoded.
	jpegOutBytes = 4
	// vp8lBytes is a lossless WebP pixel: the ARGB buffer, and the
	// colour-indexing transform's second buffer of the full width.
	vp8lBytes = 8
	// vp8AlphaBytes is a lossy WebP's alpha plane (1 byte a pixel) and,
	// when the ALPH chunk is VP8L-compressed, that decode's buffers.
	vp8AlphaRawBytes  = 1
	vp8AlphaVP8LBytes = 1 + vp8lBytes
	// pngInterlaceFactor: an interlaced PNG's seven passes are decoded
	// into images of their own (the image's pixels in all) and merged into
	// a second.
	pngInterlaceFactor = 2
	// gifBytes is a GIF pixel: the frame, and the screen-sized copy
	// firstFrame makes of a smaller one.
	gifBytes = 2
)

// decodeCost is an upper bound on the bytes Go's decoder allocates for the
// file, from the headers Decode has read; a header it cannot read is
// refused, since the decoder would refuse it too.
func decodeCost(format string, data []byte, cfg image.Config) (int64, error) {
	w, h := int64(cfg.Width), int64(cfg.Height)
	px := w * h
	switch format {
	case "jpeg":
		return jpegCost(data)
	case "webp":
		return webpCost(data, cfg)
	case "gif":
		return px * gifBytes, nil
	}
	cost := px * int64(bytesPerPixel(cfg.ColorModel))
	// IHDR: signature 8, length 4, "IHDR" 4, width, height, depth, colour
	// type, compression, filter, interlace (byte 28).
	if len(data) > 28 && data[28] == 1 {
		cost *= pngInterlaceFactor
	}
	return cost, nil
}

// jpegCost counts what image/jpeg allocates from the frame header (SOF):
// each component's planes in whole MCUs as its makeImg lays them out
// (the second chroma plane sized as the first), the progressive decoder's
// coefficients for every block, and the RGBA or CMYK image a 4-component
// or RGB file is converted into.
func jpegCost(data []byte) (int64, error) {
	sof, marker, rgb, err := jpegFrame(data)
	if err != nil {
		return 0, err
	}
	if len(sof) < 6 {
		return 0, errors.New("short frame header")
	}
	h, w, n := int64(binary.BigEndian.Uint16(sof[1:])), int64(binary.BigEndian.Uint16(sof[3:])), int(sof[5])
	if n != 1 && n != 3 && n != 4 || len(sof) < 6+3*n {
		return 0, errors.New("bad frame header")
	}
	hv := func(i int) (int64, int64) {
		if n == 1 {
			return 1, 1 // one component: one block per MCU, whatever it declares
		}
		f := sof[6+3*i+1]
		return int64(max(f>>4, 1)), int64(max(f&15, 1))
	}
	h0, v0 := hv(0)
	mxx, myy := (w+8*h0-1)/(8*h0), (h+8*v0-1)/(8*v0)
	blocks := func(i int) int64 {
		hi, vi := hv(i)
		return mxx * myy * hi * vi
	}
	var planes, all int64
	for i := range n {
		all += blocks(i)
		switch {
		case i == 2:
			planes += blocks(1)
		default:
			planes += blocks(i)
		}
	}
	cost := planes * jpegBlockBytes
	if marker == 0xc2 {
		cost += all * jpegCoeffBytes
	}
	if n == 4 || n == 3 && rgb {
		cost += w * h * jpegOutBytes
	}
	return cost, nil
}

// jpegFrame walks a JPEG's markers to its frame header: the SOF segment's
// body, its marker, and whether the decoder may turn the planes into RGBA
// (components named R, G, B, or an Adobe APP14 segment of transform 0).
func jpegFrame(data []byte) (sof []byte, marker byte, rgb bool, err error) {
	p := 2
	for p+4 <= len(data) {
		if data[p] != 0xff {
			return nil, 0, false, errors.New("no marker where one belongs")
		}
		m := data[p+1]
		if m == 0xff { // fill byte
			p++
			continue
		}
		if m == 0x01 || m >= 0xd0 && m <= 0xd7 { // no length
			p += 2
			continue
		}
		n := int(binary.BigEndian.Uint16(data[p+2:]))
		if n < 2 || p+2+n > len(data) {
			return nil, 0, false, errors.New("a segment runs past the file")
		}
		body := data[p+4 : p+2+n]
		switch {
		case m == 0xee && len(body) >= 12 && string(body[:5]) == "Adobe" && body[11] == 0:
			rgb = true
		case m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc:
			if len(body) >= 15 && body[5] == 3 && body[6] == 'R' && body[9] == 'G' && body[12] == 'B' {
				rgb = true
			}
			return body, m, rgb, nil
		case m == 0xda || m == 0xd9:
			return nil, 0, false, errors.New("no frame header")
		}
		p += 2 + n
	}
	return nil, 0, false, errors.New("no frame header")
}

// webpCost reads the bitstream chunk's own size (VP8 or VP8L), refuses one
// that is not the size the file declares (a VP8X canvas is what
// DecodeConfig reports, but x/image decodes the bitstream at its own
// size), and counts the buffers its decode allocates.
func webpCost(data []byte, cfg image.Config) (int64, error) {
	alpha := int64(0)
	for p := 12; p+8 <= len(data); {
		id, n := string(data[p:p+4]), int64(binary.LittleEndian.Uint32(data[p+4:]))
		body := data[p+8:]
		if n > int64(len(body)) {
			return 0, errors.New("a chunk runs past the file")
		}
		body = body[:n]
		var w, h int
		switch id {
		case "ALPH":
			alpha = vp8AlphaRawBytes
			if len(body) > 0 && body[0]&3 == 1 {
				alpha = vp8AlphaVP8LBytes
			}
			p += 8 + int(n+n&1)
			continue
		case "VP8 ":
			// frame tag 3, start code 3, then 14-bit width and height
			// each with 2 scale bits
			if len(body) < 10 {
				return 0, errors.New("short VP8 header")
			}
			w, h = int(binary.LittleEndian.Uint16(body[6:])&0x3fff), int(binary.LittleEndian.Uint16(body[8:])&0x3fff)
		case "VP8L":
			// signature 0x2f, then 14-bit width−1 and height−1
			if len(body) < 5 || body[0] != 0x2f {
				return 0, errors.New("bad VP8L header")
			}
			v := binary.LittleEndian.Uint32(body[1:])
			w, h = int(v&0x3fff)+1, int(v>>14&0x3fff)+1
		default:
			p += 8 + int(n+n&1)
			continue
		}
		if w != cfg.Width || h != cfg.Height {
			return 0, fmt.Errorf("its %s bitstream is %dx%d, not the %dx%d it declares", id, w, h, cfg.Width, cfg.Height)
		}
		if id == "VP8L" {
			return int64(w) * int64(h) * vp8lBytes, nil
		}
		mw, mh := int64(w+15)/16*16, int64(h+15)/16*16
		return mw*mh*3/2 + int64(w)*int64(h)*alpha, nil
	}
	return 0, errors.New("no VP8 or VP8L chunk")
}
