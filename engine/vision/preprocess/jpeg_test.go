package preprocess

import (
	"encoding/binary"
	"image"
	"math"
	"math/rand/v2"
	"testing"
)

// JPEG decoders differ. Decode upsamples chroma and converts colour as
// libjpeg does (jpeg.go), so Go's pixels differ from PIL's only through
// the IDCTs: measured on the reference photo, a mean of 0.041 and at most
// 3 levels (against 7.9 and 94 with image/jpeg's repeated chroma and
// colour conversion). The bounds leave a margin over that and still fail
// the old conversion by far.
const (
	jpegMeanTol = 0.25 // mean absolute difference per channel value
	jpegMaxTol  = 6    // largest, of 255
)

// TestJPEGNearPIL measures Go's JPEG decoding of the reference photo (4:2:0)
// against PIL's, and the pixel values preprocessed from it against the
// processor's.
func TestJPEGNearPIL(t *testing.T) {
	var exp expected
	readJSON(t, "expected.json", &exp)
	e := exp.Cases["photo"]
	img, err := Decode(readFile(t, "photo.jpg"), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	want := readGzip(t, "photo.decoded.rgb.gz")
	w, h := e.ImageSize[0], e.ImageSize[1]
	got := make([]uint8, w*h*3)
	rows := rgbRows(img)
	for y := range h {
		rows(y, got[y*w*3:(y+1)*w*3])
	}
	sum, worst := 0, 0
	for i := range got {
		d := int(got[i]) - int(want[i])
		d = max(d, -d)
		sum += d
		worst = max(worst, d)
	}
	mean := float64(sum) / float64(len(got))
	t.Logf("Go against PIL on photo.jpg: mean difference %.3f, largest %d (of 255)", mean, worst)
	if mean > jpegMeanTol || worst > jpegMaxTol {
		t.Fatalf("mean %.3f (bound %g), largest %d (bound %d)", mean, jpegMeanTol, worst, jpegMaxTol)
	}
	// Normalised, a level is 2/255; the resize averages, so the values
	// differ by no more levels than the pixels do.
	px, err := Preprocess(img, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ref := readGzip(t, "photo.pixels.f32.gz")
	if len(ref) != 4*len(px.Values) {
		t.Fatalf("%d values, the processor %d", len(px.Values), len(ref)/4)
	}
	vworst := 0.0
	for i, v := range px.Values {
		vworst = max(vworst, math.Abs(float64(v-math.Float32frombits(binary.LittleEndian.Uint32(ref[4*i:])))))
	}
	t.Logf("pixel values from Go's decoding against the processor's: largest difference %g (%.1f levels)", vworst, vworst*255/2)
	if vworst > jpegMaxTol*2/255.0+pixelTol {
		t.Fatalf("pixel values differ by %g, over %d levels", vworst, jpegMaxTol)
	}
}

// TestFancyUpsampling: for 4:2:0 and 4:2:2 images of odd and even sizes,
// every upsampled chroma sample lies within the range of the chroma
// samples around it: the filter's indexing at every edge, which the 4:2:0
// photo does not reach for 4:2:2.
func TestFancyUpsampling(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, ratio := range []image.YCbCrSubsampleRatio{image.YCbCrSubsampleRatio420, image.YCbCrSubsampleRatio422} {
		for _, size := range [][2]int{{6, 5}, {7, 4}, {33, 17}} {
			m := image.NewYCbCr(image.Rect(0, 0, size[0], size[1]), ratio)
			for i := range m.Cb {
				m.Cb[i], m.Cr[i] = uint8(r.IntN(256)), 77
			}
			rows, ok := fancyRows(m)
			if !ok {
				t.Fatalf("%v %v: not upsampled", ratio, size)
			}
			dst := make([]uint8, size[0]*3)
			for y := range size[1] {
				rows(y, dst)
				for x := range size[0] {
					// The blue channel moves with Cb alone; recover the
					// upsampled Cb from it through the same table.
					lo, hi := 255, 0
					for _, cy := range []int{y, y - 1, y + 1} {
						if ratio == image.YCbCrSubsampleRatio422 && cy != y {
							continue
						}
						for _, cx := range []int{x - 1, x, x + 1} {
							cx, cy := min(max(cx, 0), size[0]-1), min(max(cy, 0), size[1]-1)
							v := int(m.Cb[m.COffset(cx, cy)])
							lo, hi = min(lo, v), max(hi, v)
						}
					}
					var want [3]uint8
					yccToRGB(want[:], m.Y[m.YOffset(x, y)], uint8(lo), 77)
					low := want[2]
					yccToRGB(want[:], m.Y[m.YOffset(x, y)], uint8(hi), 77)
					if b := dst[x*3+2]; b < low || b > want[2] {
						t.Fatalf("%v %v (%d, %d): blue %d outside [%d, %d] of its neighbours' chroma", ratio, size, x, y, b, low, want[2])
					}
				}
			}
		}
	}
}
