package preprocess

import (
	"errors"
	"image"
	"image/color"
	"math"
)

// Grid is an image's size in patches: T frames of temporal_patch_size,
// H x W patches of patch_size² (the processor's image_grid_thw).
type Grid struct{ T, H, W int }

// Patches is the number of rows of the pixel values, T·H·W.
func (g Grid) Patches() int { return g.T * g.H * g.W }

// Pixels is one image as the vision tower takes it: Grid.Patches() rows of
// PatchDim values (channel, time, y, x within the patch), rows in the
// processor's order (merge blocks row-major, the patches of a block
// row-major inside it), as transformers' pixel_values.
type Pixels struct {
	Grid     Grid
	Merge    int // merge_size: Tokens merges Merge² patches into one
	PatchDim int // 3·temporal_patch_size·patch_size²
	Values   []float32

	// Height and Width are the resized image's size in pixels.
	Height, Width int
}

// Tokens is the number of image tokens the prompt holds for the image.
func (p Pixels) Tokens() int { return p.Grid.Patches() / (p.Merge * p.Merge) }

// SmartResize is the processor's smart_resize (transformers 5.17): the
// size the image is resized to, both sides multiples of cfg.Factor(), the
// area within [cfg.MinPixels, cfg.MaxPixels] at about the same aspect
// ratio. Python's round() rounds half to even, as here. It refuses what
// the processor refuses, an aspect ratio past [MaxAspect], with a
// [*LimitError]; any side from 1 up is grown to min_pixels.
func SmartResize(height, width int, cfg Config) (int, int, error) {
	f := cfg.Factor()
	if height < 1 || width < 1 {
		return 0, 0, invalid("image", errors.New("it has no pixels"))
	}
	if float64(max(height, width))/float64(min(height, width)) > MaxAspect {
		return 0, 0, &LimitError{Limit: "MaxAspect", What: "long side / short side", Max: MaxAspect, Got: int64(max(height, width) / min(height, width))}
	}
	ff := float64(f)
	h := int(math.RoundToEven(float64(height)/ff)) * f
	w := int(math.RoundToEven(float64(width)/ff)) * f
	area := float64(height) * float64(width)
	switch {
	case h*w > cfg.MaxPixels:
		beta := math.Sqrt(area / float64(cfg.MaxPixels))
		h = max(f, int(math.Floor(float64(height)/beta/ff))*f)
		w = max(f, int(math.Floor(float64(width)/beta/ff))*f)
	case h*w < cfg.MinPixels:
		beta := math.Sqrt(float64(cfg.MinPixels) / area)
		h = int(math.Ceil(float64(height)*beta/ff)) * f
		w = int(math.Ceil(float64(width)*beta/ff)) * f
	}
	return h, w, nil
}

// Preprocess resizes, normalises and patchifies a still image as the
// processor does (see the package doc).
func Preprocess(img image.Image, cfg Config) (Pixels, error) {
	b := img.Bounds()
	px, err := Shape(b.Dy(), b.Dx(), cfg)
	if err != nil {
		return Pixels{}, err
	}
	rgb := resizeRGB(rgbRows(img), b.Dx(), b.Dy(), px.Width, px.Height)
	patchify(rgb, &px, cfg)
	return px, nil
}

// Shape is what [Preprocess] makes of an image of height x width, its
// values left out: the grid, and so the tokens, are known from the
// image's header ([Probe]) without decoding it.
func Shape(height, width int, cfg Config) (Pixels, error) {
	if err := cfg.Validate(); err != nil {
		return Pixels{}, err
	}
	h, w, err := SmartResize(height, width, cfg)
	if err != nil {
		return Pixels{}, err
	}
	p := cfg.PatchSize
	return Pixels{
		Grid:     Grid{T: 1, H: h / p, W: w / p},
		Merge:    cfg.MergeSize,
		PatchDim: 3 * cfg.TemporalPatchSize * p * p,
		Height:   h,
		Width:    w,
	}, nil
}

// patchify normalises the resized RGB image and lays it out in px.Values
// as the processor's flatten_patches: the view (t, T, C, H/m, m, P, W/m,
// m, P) permuted to (t, H/m, W/m, m, m, C, T, P, P), with the frame
// repeated T times since a still image is one frame.
func patchify(rgb []uint8, px *Pixels, cfg Config) {
	p, m, tp := cfg.PatchSize, cfg.MergeSize, cfg.TemporalPatchSize
	w := px.Width
	// The processor fuses rescale and normalise: mean and std times
	// 1/rescale_factor in float32, then (x − mean) / std in float32.
	var lut [3][256]float32
	inv := float32(1 / cfg.RescaleFactor)
	for c := range 3 {
		mean, std := float32(cfg.Mean[c])*inv, float32(cfg.Std[c])*inv
		for v := range 256 {
			lut[c][v] = (float32(v) - mean) / std
		}
	}
	px.Values = make([]float32, px.Grid.Patches()*px.PatchDim)
	out := px.Values
	for bh := range px.Grid.H / m {
		for bw := range px.Grid.W / m {
			for mh := range m {
				for mw := range m {
					y0, x0 := (bh*m+mh)*p, (bw*m+mw)*p
					for c := range 3 {
						frame := out[:p*p]
						for y := range p {
							src := rgb[((y0+y)*w+x0)*3+c:]
							row := frame[y*p : (y+1)*p]
							for x := range row {
								row[x] = lut[c][src[x*3]]
							}
						}
						out = out[p*p:]
						// A still image's frame, repeated over the temporal patch.
						for range tp - 1 {
							out = out[copy(out, frame):]
						}
					}
				}
			}
		}
	}
}

// rgbRows reads an image row by row as 8-bit RGB as PIL opens the file and
// the processor converts it: alpha dropped as convert("RGB") drops it (the
// stored colour kept, not composited). Go's PNG decoder gives an opaque
// 16-bit RGB image as RGBA64, which the generic path reads as PIL does
// (the high bytes).
func rgbRows(img image.Image) func(y int, dst []uint8) {
	b := img.Bounds()
	switch m := img.(type) {
	case *image.NRGBA:
		return func(y int, dst []uint8) {
			src := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
			for x := range b.Dx() {
				copy(dst[x*3:x*3+3], src[x*4:x*4+3])
			}
		}
	case *image.RGBA:
		return func(y int, dst []uint8) {
			src := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
			for x := range b.Dx() {
				s := src[x*4 : x*4+4]
				if s[3] == 0xff {
					copy(dst[x*3:x*3+3], s[:3])
					continue
				}
				putNRGBA(dst[x*3:], color.RGBA{s[0], s[1], s[2], s[3]})
			}
		}
	case *image.Gray:
		return func(y int, dst []uint8) {
			src := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
			for x := range b.Dx() {
				dst[x*3], dst[x*3+1], dst[x*3+2] = src[x], src[x], src[x]
			}
		}
	case *image.NRGBA64:
		// PIL reads a 16-bit PNG's colour channels as their high bytes
		// ("RGB;16B", "RGBA;16B", "LA;16B").
		return func(y int, dst []uint8) {
			src := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
			for x := range b.Dx() {
				dst[x*3], dst[x*3+1], dst[x*3+2] = src[x*8], src[x*8+2], src[x*8+4]
			}
		}
	case *image.Gray16:
		// PIL opens a 16-bit grayscale PNG as mode "I;16", whose conversion
		// to RGB clips each value to 255 rather than scaling it: the
		// processor sees what that gives, and so does the model.
		return func(y int, dst []uint8) {
			src := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
			for x := range b.Dx() {
				v := uint8(255)
				if src[x*2] == 0 {
					v = src[x*2+1]
				}
				dst[x*3], dst[x*3+1], dst[x*3+2] = v, v, v
			}
		}
	case *image.YCbCr:
		if rows, ok := fancyRows(m); ok && b.Min == (image.Point{}) {
			return rows
		}
		return func(y int, dst []uint8) {
			for x := range b.Dx() {
				yi, ci := m.YOffset(b.Min.X+x, b.Min.Y+y), m.COffset(b.Min.X+x, b.Min.Y+y)
				yccToRGB(dst[x*3:], m.Y[yi], m.Cb[ci], m.Cr[ci])
			}
		}
	case *image.NYCbCrA:
		return rgbRows(&m.YCbCr)
	case *image.Paletted:
		var table [256][3]uint8
		for i, c := range m.Palette {
			putNRGBA(table[i][:], c)
		}
		return func(y int, dst []uint8) {
			src := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
			for x := range b.Dx() {
				copy(dst[x*3:x*3+3], table[src[x]][:])
			}
		}
	}
	return func(y int, dst []uint8) {
		for x := range b.Dx() {
			putNRGBA(dst[x*3:], img.At(b.Min.X+x, b.Min.Y+y))
		}
	}
}

// putNRGBA writes c's non-premultiplied 8-bit RGB.
func putNRGBA(dst []uint8, c color.Color) {
	n := color.NRGBAModel.Convert(c).(color.NRGBA)
	dst[0], dst[1], dst[2] = n.R, n.G, n.B
}
