package preprocess

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The bounds on a hostile image: refused within a second, with
// peak memory under 256 MB. Memory is measured as the bytes allocated
// during the call (runtime.MemStats.TotalAlloc), which bounds the heap's
// growth from above; refusals must stay far under the bound.
const (
	hostileTime  = time.Second
	hostileAlloc = 64 << 20
)

// pngFile builds a PNG from its header's figures and the raw (filtered)
// scanlines given, compressed: a file that may lie about its size.
func pngFile(w, h uint32, depth, ctype byte, raw []byte) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		binary.Write(&b, binary.BigEndian, uint32(len(data)))
		b.WriteString(typ)
		b.Write(data)
		binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	chunk("IHDR", append(ihdr, depth, ctype, 0, 0, 0))
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(raw)
	zw.Close()
	chunk("IDAT", z.Bytes())
	chunk("IEND", nil)
	return b.Bytes()
}

// gifFrames builds a 1x1 GIF of n frames.
func gifFrames(n int) []byte {
	pal := color.Palette{color.Black, color.White}
	g := &gif.GIF{}
	for i := range n {
		m := image.NewPaletted(image.Rect(0, 0, 1, 1), pal)
		m.Pix[0] = uint8(i % 2)
		g.Image = append(g.Image, m)
		g.Delay = append(g.Delay, 1)
	}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, g); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// measure runs f and returns its time, the bytes it allocated and its
// error. The time is the best of measureRuns runs: this machine's
// cores are shared, and a refusal that is slow by itself is slow every time.
func measure(f func() error) (took time.Duration, alloc uint64, err error) {
	for i := range measureRuns {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		err = f()
		t := time.Since(start)
		runtime.ReadMemStats(&after)
		if i == 0 || t < took {
			took = t
		}
		alloc = max(alloc, after.TotalAlloc-before.TotalAlloc)
	}
	return took, alloc, err
}

const measureRuns = 3

// checkRefused holds a refusal to the bounds and, when limit is
// named, to a *LimitError naming it and its value in the text.
func checkRefused(t *testing.T, err error, took time.Duration, alloc uint64, limit string) {
	t.Helper()
	t.Logf("%v in %v, %.1f MB allocated", err, took.Round(time.Microsecond), float64(alloc)/1e6)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("error %v, want a refusal (ErrRefused)", err)
	}
	if took > hostileTime || alloc > hostileAlloc {
		t.Fatalf("took %v and %d bytes, bounds %v and %d", took, alloc, hostileTime, hostileAlloc)
	}
	if limit == "" {
		return
	}
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != limit {
		t.Fatalf("error %v, want the limit %s", err, limit)
	}
	if msg := err.Error(); !strings.Contains(msg, limit) || !strings.Contains(msg, fmt.Sprint(le.Max)) {
		t.Fatalf("message %q does not name %s and its value %d", msg, limit, le.Max)
	}
}

// TestDecodeRefusesHostile: the hostile images, each built here,
// refused before their pixels are decoded.
func TestDecodeRefusesHostile(t *testing.T) {
	row := []byte{0, 1, 2, 3} // one filtered scanline's start; the rest is missing
	cases := []struct {
		name, limit string
		data        []byte
	}{
		{"50k x 50k PNG", "MaxSide", pngFile(50000, 50000, 8, 2, row)},
		{"16k x 16k PNG", "MaxPixels", pngFile(16000, 16000, 8, 6, row)},
		{"16-bit RGBA PNG of 32 megapixels", "MaxDecodedBytes", pngFile(8000, 4000, 16, 6, row)},
		{"10k-frame GIF", "MaxFrames", gifFrames(10000)},
		{"over MaxBytes", "MaxBytes", append(pngFile(64, 64, 8, 2, row), make([]byte, MaxBytes)...)},
		// A header declaring 96 MB of pixels over a file of a few hundred
		// bytes: refused from the sizes, before the image is allocated.
		{"lying PNG header (large) over little data", "", pngFile(8000, 4000, 8, 2, row)},
		// A header declaring 10x10 over 10 MB of scanlines: the decoder
		// reads what the header declares and refuses the rest.
		{"lying PNG header (small) over much data", "", pngFile(10, 10, 8, 2, make([]byte, 10<<20))},
		{"not an image", "", []byte("<svg xmlns='http://www.w3.org/2000/svg'/>")},
		{"empty", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var img image.Image
			took, alloc, err := measure(func() (err error) {
				img, err = Decode(c.data, DefaultLimits())
				return err
			})
			if img != nil {
				t.Fatalf("decoded a %v image", img.Bounds())
			}
			checkRefused(t, err, took, alloc, c.limit)
		})
	}
}

// TestDecodeRefusesTooManyImages: a request of 20 images is refused by its
// count, before any is decoded; 16 are not.
func TestDecodeRefusesTooManyImages(t *testing.T) {
	if err := CheckCount(MaxImagesPerRequest); err != nil {
		t.Fatalf("%d images: %v", MaxImagesPerRequest, err)
	}
	took, alloc, err := measure(func() error { return CheckCount(20) })
	checkRefused(t, err, took, alloc, "MaxImagesPerRequest")
}

// TestDecodeRefusesTruncated: every format cut short inside its pixel data
// (or its header) is refused, never decoded in part or a panic.
func TestDecodeRefusesTruncated(t *testing.T) {
	for _, name := range []string{"down.png", "photo.jpg", "anim.gif", "lossy.webp", "lossless.webp"} {
		data := readFile(t, name)
		if _, err := Decode(data, DefaultLimits()); err != nil {
			t.Fatalf("%s whole: %v", name, err)
		}
		// The GIF's first frame ends before its other frames, which the
		// decoder never reads; cut inside the first.
		end := len(data)
		if name == "anim.gif" {
			end = firstGIFFrameEnd(t, data)
		}
		for _, n := range []int{0, 8, 20, end / 3, end * 2 / 3, end - 2} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				took, alloc, err := measure(func() error {
					_, err := Decode(data[:n], DefaultLimits())
					return err
				})
				checkRefused(t, err, took, alloc, "")
			})
		}
	}
}

// firstGIFFrameEnd is the offset past the first image's data.
func firstGIFFrameEnd(t *testing.T, data []byte) int {
	p := 13 + 3<<((data[10]&7)+1)
	for p < len(data) {
		switch data[p] {
		case 0x21:
			p = skipSubBlocks(data, p+2)
		case 0x2c:
			q := p + 10
			if f := data[p+9]; f&0x80 != 0 {
				q += 3 << ((f & 7) + 1)
			}
			return skipSubBlocks(data, q+1)
		default:
			t.Fatalf("byte %#x at %d", data[p], p)
		}
	}
	t.Fatal("no frame")
	return 0
}

// TestDecodeLyingJPEG: a JPEG whose header claims 6000x5000 over a small
// file's data is refused; the decoder allocates the declared image (JPEG
// has no bound of data against size), which MaxDecodedBytes keeps small.
func TestDecodeLyingJPEG(t *testing.T) {
	data := bytes.Clone(readFile(t, "photo.jpg"))
	sof := bytes.Index(data, []byte{0xff, 0xc0})
	if sof < 0 {
		t.Fatal("no SOF0 marker")
	}
	binary.BigEndian.PutUint16(data[sof+5:], 5000)
	binary.BigEndian.PutUint16(data[sof+7:], 6000)
	var le *LimitError
	if _, err := Decode(data, Limits{Pixels: 1000}); !errors.As(err, &le) || le.Got != 30_000_000 {
		t.Fatalf("the header was not read as 6000x5000: %v", err)
	}
	took, alloc, err := measure(func() error {
		_, err := Decode(data, DefaultLimits())
		return err
	})
	t.Logf("%v in %v, %.1f MB allocated", err, took, float64(alloc)/1e6)
	if !errors.Is(err, ErrRefused) || took > hostileTime || alloc > 256<<20 {
		t.Fatalf("error %v, %v, %d bytes", err, took, alloc)
	}
}

// TestDecodeFormats: each format decodes to the size its header gives.
func TestDecodeFormats(t *testing.T) {
	for name, size := range map[string][2]int{
		"down.png": {900, 600}, "photo.jpg": {300, 200}, "anim.gif": {64, 48},
		"lossy.webp": {0, 0}, "lossless.webp": {0, 0},
	} {
		img, err := Decode(readFile(t, name), DefaultLimits())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b := img.Bounds()
		if size != [2]int{0, 0} && (b.Dx() != size[0] || b.Dy() != size[1]) {
			t.Fatalf("%s: %v, want %v", name, b, size)
		}
		if _, err := Preprocess(img, DefaultConfig()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// FuzzDecode: no input makes Decode or Preprocess panic, and whatever
// Decode accepts is within its limits.
func FuzzDecode(f *testing.F) {
	// Small seeds, so that the fuzzer's mutations and minimisation stay quick.
	for _, name := range []string{"alpha.png", "anim.gif", "lossy.webp", "lossless.webp"} {
		data, err := testdataFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	var j bytes.Buffer
	if err := jpeg.Encode(&j, image.NewGray(image.Rect(0, 0, 24, 17)), nil); err != nil {
		f.Fatal(err)
	}
	f.Add(j.Bytes())
	f.Add(pngFile(3, 2, 8, 2, make([]byte, 2*10)))
	f.Add(gifFrames(3))
	lim := Limits{Bytes: 1 << 20, Side: 512, Pixels: 1 << 16, DecodedBytes: 1 << 18, Frames: 4}
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := Decode(data, lim)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("error %v is not a refusal", err)
			}
			return
		}
		b := img.Bounds()
		if b.Dx() > lim.Side || b.Dy() > lim.Side || int64(b.Dx()*b.Dy()) > lim.Pixels {
			t.Fatalf("accepted %v", b)
		}
		cfg := DefaultConfig()
		cfg.MinPixels, cfg.MaxPixels = 1024, 1<<14
		if _, err := Preprocess(img, cfg); err != nil && !errors.Is(err, ErrRefused) {
			t.Fatalf("Preprocess: %v", err)
		}
	})
}
