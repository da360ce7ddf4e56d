// Command visprep writes the images of engine/vision/preprocess's reference
// test and the manifest naming each one's processor configuration; ref.py
// beside it then runs transformers' processor on them (on a machine with
// torch and transformers) and writes the expected pixel values.
//
//	go run ./tools/visprep -out engine/vision/preprocess/testdata
//	python3 tools/visprep/ref.py engine/vision/preprocess/testdata OUT
//
// Every image is drawn from formulas and a fixed-seed generator, so a rerun
// writes the same bytes.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Case is one reference image: its file and the processor's size bounds
// (size.shortest_edge, size.longest_edge); the other values are Qwen3.6's.
type Case struct {
	Name      string `json:"name"`
	File      string `json:"file"`
	MinPixels int    `json:"min_pixels"`
	MaxPixels int    `json:"max_pixels"`
	Why       string `json:"why"`
}

// Qwen3.6's size bounds; the down-scaling case lowers max_pixels so its
// image shrinks (past the real 16.7 MP the expected values would not fit
// in testdata), through the same smart_resize and resize.
const (
	minPixels = 65536
	maxPixels = 16777216
	downMax   = 131072
)

// resizeCase is one direct check of the resize alone (torchvision's
// F.resize on a uint8 image): random pixels, sizes not on the patch grid.
type resizeCase struct {
	InW, InH, OutW, OutH int
	Seed                 uint64
}

func main() {
	out := flag.String("out", "engine/vision/preprocess/testdata", "folder to write into")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	cases := []Case{
		{"down", "down.png", minPixels, downMax, "900x600 shrunk to 416x288 (max_pixels 131072): antialiased down-scaling"},
		{"up", "up.png", minPixels, maxPixels, "50x37 grown to 320x224 (min_pixels 65536): up-scaling"},
		{"wide", "wide.png", minPixels, maxPixels, "1000x40, aspect 25: an odd aspect ratio grown to min_pixels"},
		{"alpha", "alpha.png", minPixels, maxPixels, "RGBA with transparent pixels: alpha dropped, not composited"},
		{"gray", "gray.png", minPixels, maxPixels, "8-bit grayscale"},
		{"anim", "anim.gif", minPixels, maxPixels, "a GIF of 3 frames, the first smaller than the screen: first frame only"},
		{"photo", "photo.jpg", minPixels, maxPixels, "a 4:2:0 JPEG: Go's decoder against libjpeg's (PIL)"},
	}
	files := map[string][]byte{
		"down.png":  encodePNG(scene(900, 600, 1)),
		"up.png":    encodePNG(noise(50, 37, 2)),
		"wide.png":  encodePNG(scene(1000, 40, 3)),
		"alpha.png": encodePNG(withAlpha(scene(40, 48, 4))),
		"gray.png":  encodePNG(gray(70, 45)),
		"anim.gif":  encodeGIF(),
		"photo.jpg": encodeJPEG(scene(300, 200, 5)),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(*out, name), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	// The resize alone, both ways and by odd factors, from random images.
	var resizes []resizeCase
	for i, s := range [][4]int{
		{40, 30, 17, 11}, {40, 30, 97, 61}, {123, 77, 32, 32}, {33, 200, 64, 35},
		{64, 64, 64, 50}, {64, 64, 50, 64}, {31, 17, 256, 130}, {300, 40, 41, 39},
	} {
		resizes = append(resizes, resizeCase{s[0], s[1], s[2], s[3], uint64(100 + i)})
		img := noise(s[0], s[1], uint64(100+i))
		name := fmt.Sprintf("resize%d.rgb", i)
		if err := os.WriteFile(filepath.Join(*out, name), rgbBytes(img), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	manifest := map[string]any{
		"generator":        "go run ./tools/visprep; python3 tools/visprep/ref.py",
		"cases":            cases,
		"resize":           resizes,
		"smart_resize":     smartResizeSizes(),
		"patch_size":       16,
		"merge_size":       2,
		"temporal_patch":   2,
		"image_mean":       []float64{0.5, 0.5, 0.5},
		"image_std":        []float64{0.5, 0.5, 0.5},
		"rescale_factor":   1.0 / 255,
		"resample_bicubic": 3,
	}
	b, err := json.MarshalIndent(manifest, "", " ")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "manifest.json"), append(b, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
}

// smartResizeSizes are (height, width, min_pixels, max_pixels) for
// smart_resize alone: random sizes from 32 to 20000 at aspect ratios up to
// 200, and edges where Python's round-half-even and float sqrt matter.
func smartResizeSizes() [][4]int {
	r := rand.New(rand.NewPCG(7, 34))
	s := [][4]int{
		{48, 48, minPixels, maxPixels}, {80, 80, minPixels, maxPixels}, {40, 1000, minPixels, maxPixels},
		{4096, 4096, minPixels, maxPixels}, {4097, 4096, minPixels, maxPixels}, {6000, 4000, minPixels, maxPixels},
		{32, 6400, minPixels, maxPixels}, {16384, 82, minPixels, maxPixels}, {600, 900, minPixels, downMax},
	}
	for range 300 {
		short := 32 + r.IntN(3000)
		long := short + r.IntN(min(short*199, 20000-short)+1)
		h, w := short, long
		if r.IntN(2) == 0 {
			h, w = w, h
		}
		lo, hi := minPixels, maxPixels
		if r.IntN(3) == 0 {
			lo, hi = 4096*(1+r.IntN(8)), 65536*(2+r.IntN(64))
		}
		s = append(s, [4]int{h, w, lo, hi})
	}
	return s
}

// scene draws gradients, rings, a checkerboard and thin lines: edges at
// every frequency for the filter, and smooth areas that compress well.
func scene(w, h int, seed uint64) *image.NRGBA {
	r := rand.New(rand.NewPCG(seed, 1))
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	cx, cy := float64(w)*0.6, float64(h)*0.4
	for y := range h {
		for x := range w {
			d := math.Hypot(float64(x)-cx, float64(y)-cy)
			ring := 127.5 + 127.5*math.Sin(d*d/float64(4*max(w, h)))
			c := color.NRGBA{
				R: uint8(255 * x / max(w-1, 1)),
				G: uint8(ring),
				B: uint8(255 * y / max(h-1, 1)),
				A: 255,
			}
			if (x/7+y/5)%2 == 0 && x < w/3 {
				c.B = 255 - c.B
			}
			if x%23 == 0 || y%19 == 0 {
				c.R, c.G = 250, 10
			}
			img.SetNRGBA(x, y, c)
		}
	}
	// A patch of noise, the hardest input for a fixed-point filter.
	for y := h / 2; y < h/2+min(h/4, 40); y++ {
		for x := w / 2; x < w/2+min(w/4, 60); x++ {
			img.SetNRGBA(x, y, color.NRGBA{uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256)), 255})
		}
	}
	return img
}

func noise(w, h int, seed uint64) *image.NRGBA {
	r := rand.New(rand.NewPCG(seed, 2))
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(r.IntN(256))
		if i%4 == 3 {
			img.Pix[i] = 255
		}
	}
	return img
}

// withAlpha makes the alpha vary across the image, a quarter fully
// transparent over coloured pixels.
func withAlpha(img *image.NRGBA) *image.NRGBA {
	b := img.Bounds()
	for y := range b.Dy() {
		for x := range b.Dx() {
			i := img.PixOffset(x, y)
			img.Pix[i+3] = uint8(255 * x / b.Dx())
			if y < b.Dy()/4 {
				img.Pix[i+3] = 0
			}
		}
	}
	return img
}

func gray(w, h int) *image.Gray {
	img := image.NewGray(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetGray(x, y, color.Gray{uint8((x*x + 3*y*y + x*y) % 256)})
		}
	}
	return img
}

func rgbBytes(img *image.NRGBA) []byte {
	var b []byte
	for i := 0; i < len(img.Pix); i += 4 {
		b = append(b, img.Pix[i:i+3]...)
	}
	return b
}

func encodePNG(img image.Image) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		log.Fatal(err)
	}
	return b.Bytes()
}

func encodeJPEG(img image.Image) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 92}); err != nil {
		log.Fatal(err)
	}
	return b.Bytes()
}

// encodeGIF writes 3 frames on a 64x48 screen; the first covers (4,6)-(60,40)
// only, so the decoder must place it on the screen as PIL does.
func encodeGIF() []byte {
	pal := color.Palette{color.RGBA{0, 0, 0, 255}, color.RGBA{255, 0, 0, 255}, color.RGBA{0, 200, 80, 255}, color.RGBA{30, 60, 250, 255}}
	g := &gif.GIF{Config: image.Config{Width: 64, Height: 48, ColorModel: pal}}
	for f := range 3 {
		r := image.Rect(4, 6, 60, 40)
		if f > 0 {
			r = image.Rect(0, 0, 64, 48)
		}
		m := image.NewPaletted(r, pal)
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				m.SetColorIndex(x, y, uint8((x/3+y/2+f)%len(pal)))
			}
		}
		g.Image = append(g.Image, m)
		g.Delay = append(g.Delay, 10)
	}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, g); err != nil {
		log.Fatal(err)
	}
	return b.Bytes()
}
