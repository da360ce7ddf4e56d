package preprocess

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The expected values come from transformers 5.17's processor for
// Qwen3.6 (testdata/expected.json records the versions), written by
// tools/visprep: go run ./tools/visprep writes the images and
// manifest.json, tools/visprep/ref.py the rest on a machine with torch.

// pixelTol is the bound the issue sets on the pixel values. The integer
// resize and float32 normalisation here are the processor's own, so the
// values are expected to be equal; the test logs the largest difference.
const pixelTol = 1e-5

type manifest struct {
	Cases []struct {
		Name      string `json:"name"`
		File      string `json:"file"`
		MinPixels int    `json:"min_pixels"`
		MaxPixels int    `json:"max_pixels"`
		Why       string `json:"why"`
	} `json:"cases"`
	Resize []struct{ InW, InH, OutW, OutH int } `json:"resize"`
	Smart  [][4]int                             `json:"smart_resize"`
}

type expected struct {
	Cases map[string]struct {
		ImageSize [2]int `json:"image_size"`
		Grid      [3]int `json:"grid"`
		Tokens    int    `json:"tokens"`
		Rows      int    `json:"rows"`
		Dim       int    `json:"dim"`
	} `json:"cases"`
	Smart []json.RawMessage `json:"smart_resize"`
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	if err := json.Unmarshal(readFile(t, name), v); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := testdataFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testdataFile(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join("testdata", name))
}

func readGzip(t *testing.T, name string) []byte {
	t.Helper()
	z, err := gzip.NewReader(bytes.NewReader(readFile(t, name)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func caseConfig(minPixels, maxPixels int) Config {
	cfg := DefaultConfig()
	cfg.MinPixels, cfg.MaxPixels = minPixels, maxPixels
	return cfg
}

// nrgbaFrom makes an opaque image of interleaved RGB bytes.
func nrgbaFrom(rgb []byte, w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range w * h {
		copy(img.Pix[i*4:], rgb[i*3:i*3+3])
		img.Pix[i*4+3] = 0xff
	}
	return img
}

// TestMatchesProcessor: every reference image decoded and preprocessed
// here gives the processor's grid, token count and pixel values. The
// down-scaling case (900x600 with max_pixels 131072), the up-scaling one
// (50x37 to min_pixels) and the odd aspect ratio (1000x40) are the issue's
// three; RGBA, grayscale and an animated GIF pin the conversion to RGB.
// The JPEG is preprocessed from PIL's decoding of it: JPEG decoders
// differ, and the processor starts from PIL's.
func TestMatchesProcessor(t *testing.T) {
	var man manifest
	var exp expected
	readJSON(t, "manifest.json", &man)
	readJSON(t, "expected.json", &exp)
	if len(man.Cases) < 3 {
		t.Fatalf("%d reference cases, want at least 3", len(man.Cases))
	}
	for _, c := range man.Cases {
		t.Run(c.Name, func(t *testing.T) {
			e, ok := exp.Cases[c.Name]
			if !ok {
				t.Fatalf("no expected values for %s", c.Name)
			}
			var img image.Image
			if c.Name == "photo" {
				img = nrgbaFrom(readGzip(t, "photo.decoded.rgb.gz"), e.ImageSize[0], e.ImageSize[1])
			} else {
				var err error
				if img, err = Decode(readFile(t, c.File), DefaultLimits()); err != nil {
					t.Fatal(err)
				}
			}
			if b := img.Bounds(); b.Dx() != e.ImageSize[0] || b.Dy() != e.ImageSize[1] {
				t.Fatalf("decoded %dx%d, PIL opened %dx%d", b.Dx(), b.Dy(), e.ImageSize[0], e.ImageSize[1])
			}
			px, err := Preprocess(img, caseConfig(c.MinPixels, c.MaxPixels))
			if err != nil {
				t.Fatal(err)
			}
			if g := px.Grid; [3]int{g.T, g.H, g.W} != e.Grid || px.Tokens() != e.Tokens || px.PatchDim != e.Dim {
				t.Fatalf("grid %v, %d tokens, rows of %d; the processor: %v, %d tokens, rows of %d",
					px.Grid, px.Tokens(), px.PatchDim, e.Grid, e.Tokens, e.Dim)
			}
			want := readGzip(t, c.Name+".pixels.f32.gz")
			if len(want) != 4*len(px.Values) || px.Grid.Patches() != e.Rows {
				t.Fatalf("%d values, the processor %d", len(px.Values), len(want)/4)
			}
			worst, at := 0.0, 0
			for i, v := range px.Values {
				w := math.Float32frombits(binary.LittleEndian.Uint32(want[4*i:]))
				if d := math.Abs(float64(v - w)); d > worst || math.IsNaN(d) {
					worst, at = d, i
				}
			}
			t.Logf("%s (%s): %d values, largest difference %g", c.Name, c.Why, len(px.Values), worst)
			if !(worst <= pixelTol) {
				t.Fatalf("value %d (row %d, column %d) differs by %g, over %g", at, at/px.PatchDim, at%px.PatchDim, worst, pixelTol)
			}
		})
	}
}

// TestResizeMatchesTorchvision: the resize alone, from random images to
// sizes off the patch grid, shrinking and growing by odd factors, is
// torchvision's F.resize(uint8, BICUBIC, antialias=True) byte for byte.
func TestResizeMatchesTorchvision(t *testing.T) {
	var man manifest
	readJSON(t, "manifest.json", &man)
	for i, r := range man.Resize {
		t.Run(fmt.Sprintf("%dx%d-to-%dx%d", r.InW, r.InH, r.OutW, r.OutH), func(t *testing.T) {
			in := readFile(t, fmt.Sprintf("resize%d.rgb", i))
			want := readFile(t, fmt.Sprintf("resize%d.out.rgb", i))
			got := resizeRGB(rgbRows(nrgbaFrom(in, r.InW, r.InH)), r.InW, r.InH, r.OutW, r.OutH)
			if len(got) != len(want) {
				t.Fatalf("%d bytes, torchvision %d", len(got), len(want))
			}
			diff := 0
			for j := range got {
				if got[j] != want[j] {
					if diff == 0 {
						t.Errorf("byte %d (x %d, y %d, channel %d): %d, torchvision %d", j, j/3%r.OutW, j/3/r.OutW, j%3, got[j], want[j])
					}
					diff++
				}
			}
			if diff > 0 {
				t.Fatalf("%d of %d bytes differ", diff, len(got))
			}
		})
	}
}

// TestSmartResizeMatchesProcessor: sizes from 32 to 20000 at aspect ratios
// up to 200, under several pixel bounds, give smart_resize's answer, the
// refusals included.
func TestSmartResizeMatchesProcessor(t *testing.T) {
	var man manifest
	var exp expected
	readJSON(t, "manifest.json", &man)
	readJSON(t, "expected.json", &exp)
	if len(man.Smart) != len(exp.Smart) || len(man.Smart) < 100 {
		t.Fatalf("%d sizes, %d answers", len(man.Smart), len(exp.Smart))
	}
	for i, s := range man.Smart {
		var want [2]int
		wantErr := json.Unmarshal(exp.Smart[i], &want) != nil
		h, w, err := SmartResize(s[0], s[1], caseConfig(s[2], s[3]))
		switch {
		case wantErr != (err != nil):
			t.Errorf("%dx%d in [%d, %d]: error %v, the processor %s", s[0], s[1], s[2], s[3], err, exp.Smart[i])
		case !wantErr && [2]int{h, w} != want:
			t.Errorf("%dx%d in [%d, %d]: %dx%d, the processor %v", s[0], s[1], s[2], s[3], h, w, want)
		}
	}
}
