package preprocess

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"

	"golang.org/x/image/webp"
)

// pngMaxRatio is deflate's largest compression ratio (258 bytes from a
// 2-bit code, about 1032:1): a PNG whose file is smaller than its pixels
// over this ratio cannot hold them, so its header lies and it is refused
// before the decoder allocates the image.
const pngMaxRatio = 1032

// Decode decodes one PNG, JPEG, WebP or GIF (its first frame) after
// checking lim against the file's size and header, so that no limit is
// broken by allocating the pixels. Refusals wrap [ErrRefused]; a limit's is
// a [*LimitError].
func Decode(data []byte, lim Limits) (image.Image, error) {
	format, cfg, err := probe(data, lim)
	if err != nil {
		return nil, err
	}
	img, err := decodePixels(format, data)
	if err != nil {
		return nil, invalid(format, err)
	}
	if g, ok := img.(*image.Paletted); ok && format == "gif" {
		return firstFrame(g, cfg, data)
	}
	// A decoder must give the image its header declared; anything else is
	// a lying file, whatever the decoder made of it.
	if b := img.Bounds(); b.Dx() != cfg.Width || b.Dy() != cfg.Height {
		return nil, errSize(format)
	}
	return img, nil
}

// Probe makes every check [Decode] makes before decoding the pixels, from
// the file's size and headers alone, and returns the size the headers
// declare (which Decode holds the pixels to): what a request's image
// costs in tokens, known without decoding it.
func Probe(data []byte, lim Limits) (width, height int, err error) {
	_, cfg, err := probe(data, lim)
	return cfg.Width, cfg.Height, err
}

func probe(data []byte, lim Limits) (string, image.Config, error) {
	if lim.Bytes > 0 && int64(len(data)) > lim.Bytes {
		return "", image.Config{}, &LimitError{Limit: "MaxBytes", What: "bytes", Max: lim.Bytes, Got: int64(len(data))}
	}
	format := sniff(data)
	if format == "" {
		return "", image.Config{}, errUnknownFormat
	}
	cfg, err := decodeConfig(format, data)
	if err != nil {
		return "", image.Config{}, invalid(format, err)
	}
	if err := checkHeader(format, data, cfg, lim); err != nil {
		return "", image.Config{}, err
	}
	if format == "gif" {
		if err := checkFrames(data, lim); err != nil {
			return "", image.Config{}, err
		}
	}
	return format, cfg, nil
}

func errSize(format string) error {
	return invalid(format, errors.New("the pixels do not match the header's size"))
}

var errUnknownFormat = errorString("image refused: not a PNG, JPEG, WebP or GIF file")

type errorString string

func (e errorString) Error() string        { return string(e) }
func (e errorString) Is(target error) bool { return target == ErrRefused }

// sniff names the format from its magic bytes, without registering the
// decoders globally with package image.
func sniff(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "png"
	case bytes.HasPrefix(b, []byte("\xff\xd8")):
		return "jpeg"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "gif"
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return "webp"
	}
	return ""
}

func decodeConfig(format string, data []byte) (image.Config, error) {
	r := bytes.NewReader(data)
	switch format {
	case "png":
		return png.DecodeConfig(r)
	case "jpeg":
		return jpeg.DecodeConfig(r)
	case "gif":
		return gif.DecodeConfig(r)
	default:
		return webp.DecodeConfig(r)
	}
}

func decodePixels(format string, data []byte) (image.Image, error) {
	r := bytes.NewReader(data)
	switch format {
	case "png":
		return png.Decode(r)
	case "jpeg":
		return jpeg.Decode(r)
	case "gif":
		return gif.Decode(r) // the first frame only
	default:
		return webp.Decode(r)
	}
}

// checkHeader applies the side, pixel and decoded-size limits to the
// header's figures, and refuses a PNG too small to hold what it declares.
func checkHeader(format string, data []byte, cfg image.Config, lim Limits) error {
	w, h := int64(cfg.Width), int64(cfg.Height)
	if w <= 0 || h <= 0 {
		return invalid(format, errors.New("the header declares no pixels"))
	}
	if lim.Side > 0 {
		if w > int64(lim.Side) {
			return &LimitError{Limit: "MaxSide", What: "width", Max: int64(lim.Side), Got: w}
		}
		if h > int64(lim.Side) {
			return &LimitError{Limit: "MaxSide", What: "height", Max: int64(lim.Side), Got: h}
		}
	}
	// Both sides fit in 31 bits here only when Side bounds them; a header's
	// sides are at most 2³¹ each, so the product fits in int64 regardless.
	px := w * h
	if lim.Pixels > 0 && px > lim.Pixels {
		return &LimitError{Limit: "MaxPixels", What: "width·height", Max: lim.Pixels, Got: px}
	}
	dec, err := decodeCost(format, data, cfg)
	if err != nil {
		return invalid(format, err)
	}
	if lim.DecodedBytes > 0 && dec > lim.DecodedBytes {
		return &LimitError{Limit: "MaxDecodedBytes", What: "decoder's bytes", Max: lim.DecodedBytes, Got: dec}
	}
	if format == "png" {
		raw := px * int64(bytesPerPixel(cfg.ColorModel))
		if bpp := pngBitsPerPixel(data); bpp > 0 {
			raw = (w*int64(bpp) + 7) / 8 * h
		}
		if int64(len(data))*pngMaxRatio < raw {
			return invalid(format, fmt.Errorf("its %d bytes cannot hold the %dx%d pixels its header declares", len(data), w, h))
		}
	}
	return nil
}

// bytesPerPixel is what Go's PNG decoder stores a pixel of the header's
// colour model in.
func bytesPerPixel(m color.Model) int {
	switch m {
	case color.GrayModel, color.AlphaModel:
		return 1
	case color.Gray16Model, color.Alpha16Model:
		return 2
	case color.RGBA64Model, color.NRGBA64Model:
		return 8
	}
	if _, ok := m.(color.Palette); ok {
		return 1
	}
	return 4
}

// pngBitsPerPixel reads the IHDR's bit depth and colour type (the decoder
// has checked them already); 0 if they cannot be read.
func pngBitsPerPixel(data []byte) int {
	// signature 8, length 4, "IHDR" 4, width 4, height 4, depth, colour type
	if len(data) < 26 {
		return 0
	}
	depth, ctype := int(data[24]), data[25]
	channels := map[byte]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
	return depth * channels
}

// checkFrames counts a GIF's image descriptors by walking its blocks, never
// decoding a frame, and refuses more than lim.Frames. A file that ends or
// goes wrong past the first frame is left to the decoder, which reads only
// that frame.
func checkFrames(data []byte, lim Limits) error {
	if lim.Frames <= 0 || len(data) < 13 {
		return nil
	}
	p := 13
	if flags := data[10]; flags&0x80 != 0 {
		p += 3 << ((flags & 7) + 1)
	}
	frames := 0
	for p < len(data) {
		switch data[p] {
		case 0x21: // extension: label, then sub-blocks
			p = skipSubBlocks(data, p+2)
		case 0x2c: // image descriptor
			frames++
			if frames > lim.Frames {
				return &LimitError{Limit: "MaxFrames", What: "GIF frames (at least)", Max: int64(lim.Frames), Got: int64(frames)}
			}
			if p+10 > len(data) {
				return nil
			}
			flags := data[p+9]
			p += 10
			if flags&0x80 != 0 {
				p += 3 << ((flags & 7) + 1)
			}
			p = skipSubBlocks(data, p+1) // past the LZW minimum code size
		default: // the trailer, or something the decoder will judge
			return nil
		}
	}
	return nil
}

// skipSubBlocks returns the offset past the sub-blocks starting at p (each
// a length byte and that many bytes, ended by a zero length), or len(data).
func skipSubBlocks(data []byte, p int) int {
	for p < len(data) {
		n := int(data[p])
		p++
		if n == 0 {
			return p
		}
		p += n
	}
	return len(data)
}

// firstFrame makes a GIF's first frame what PIL opens: an image of the
// logical screen's size, the frame placed on it and the rest the
// transparent index (or index 0 without one), and the transparent index
// keeping its colour from the file's colour table, which Go's decoder
// zeroes and PIL's convert("RGB") uses.
func firstFrame(g *image.Paletted, cfg image.Config, data []byte) (image.Image, error) {
	screen := image.Rect(0, 0, cfg.Width, cfg.Height)
	if !g.Bounds().In(screen) {
		return nil, errSize("gif")
	}
	transparent := -1
	for i, c := range g.Palette {
		if _, _, _, a := c.RGBA(); a == 0 {
			transparent = i
			break
		}
	}
	img := g
	if g.Bounds() != screen {
		img = image.NewPaletted(screen, g.Palette)
		if transparent >= 0 {
			for j := range img.Pix {
				img.Pix[j] = uint8(transparent)
			}
		}
		draw.Draw(img, g.Bounds(), g, g.Bounds().Min, draw.Src)
	}
	if table := gifFirstTable(data); transparent >= 0 && 3*transparent+3 <= len(table) {
		rgb := table[3*transparent:]
		img.Palette[transparent] = color.RGBA{rgb[0], rgb[1], rgb[2], 0xff}
	}
	return img, nil
}

// gifFirstTable returns the colour table the first frame uses (its own, or
// the global one), nil if the file ends first; the decoder has read the
// same bytes already.
func gifFirstTable(data []byte) []byte {
	if len(data) < 13 {
		return nil
	}
	table := func(p int, flags byte) []byte {
		if flags&0x80 == 0 {
			return nil
		}
		return data[p:min(p+3<<((flags&7)+1), len(data))]
	}
	global := table(13, data[10])
	p := 13 + len(global)
	for p < len(data) {
		switch data[p] {
		case 0x21:
			p = skipSubBlocks(data, p+2)
		case 0x2c:
			if p+10 > len(data) {
				return nil
			}
			if local := table(p+10, data[p+9]); local != nil {
				return local
			}
			return global
		default:
			return nil
		}
	}
	return nil
}
