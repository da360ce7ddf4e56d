package preprocess

import "image"

// A JPEG's pixels as PIL decodes them (libjpeg-turbo, the processor's
// decoder): the chroma of 4:2:0 and 4:2:2 images upsampled by libjpeg's
// "fancy" triangle filter (jdsample.c h2v2_fancy_upsample and
// h2v1_fancy_upsample), not repeated as image/jpeg's YCbCr.At does, and
// YCbCr turned into RGB by libjpeg's fixed-point tables (jdcolor.c). Only
// the IDCTs then differ (Go's against libjpeg's islow), by a level or two.

// libjpeg's fixed-point YCbCr to RGB: 16 fraction bits, the products
// rounded into tables as jdcolor.c builds them.
const (
	yccBits = 16
	yccHalf = 1 << (yccBits - 1)
)

var yccTables = func() (t struct{ crR, cbB, crG, cbG [256]int32 }) {
	fix := func(x float64) int32 { return int32(x*(1<<yccBits) + 0.5) }
	for i := range 256 {
		x := int32(i) - 128
		t.crR[i] = (fix(1.40200)*x + yccHalf) >> yccBits
		t.cbB[i] = (fix(1.77200)*x + yccHalf) >> yccBits
		t.crG[i] = -fix(0.71414) * x
		t.cbG[i] = -fix(0.34414)*x + yccHalf
	}
	return t
}()

func yccToRGB(dst []uint8, y, cb, cr uint8) {
	t := &yccTables
	yy := int32(y)
	dst[0] = clampU8(yy + t.crR[cr])
	dst[1] = clampU8(yy + (t.cbG[cb]+t.crG[cr])>>yccBits)
	dst[2] = clampU8(yy + t.cbB[cb])
}

// fancyRows reads a 4:2:0 or 4:2:2 image as libjpeg upsamples it; false
// for other ratios, and for chroma 2 samples wide or less, where libjpeg
// repeats samples too.
func fancyRows(m *image.YCbCr) (func(y int, dst []uint8), bool) {
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	cw, ch := (w+1)/2, h
	vertical := false
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio420:
		ch, vertical = (h+1)/2, true
	case image.YCbCrSubsampleRatio422:
	default:
		return nil, false
	}
	if cw <= 2 {
		return nil, false
	}
	cb, cr := make([]uint8, 2*cw), make([]uint8, 2*cw)
	sums := make([]int32, cw)
	// up fills out (2·cw samples) from one chroma plane for image row y.
	up := func(plane []uint8, y int, out []uint8) {
		row := func(cy int) []uint8 {
			cy = min(max(cy, 0), ch-1)
			return plane[cy*m.CStride : cy*m.CStride+cw]
		}
		if !vertical {
			in := row(y)
			out[0] = in[0]
			out[1] = uint8((int32(in[0])*3 + int32(in[1]) + 2) >> 2)
			for i := 1; i < cw-1; i++ {
				v := int32(in[i]) * 3
				out[2*i] = uint8((v + int32(in[i-1]) + 1) >> 2)
				out[2*i+1] = uint8((v + int32(in[i+1]) + 2) >> 2)
			}
			last := cw - 1
			out[2*last] = uint8((int32(in[last])*3 + int32(in[last-1]) + 1) >> 2)
			out[2*last+1] = in[last]
			return
		}
		// The nearer chroma row counts 3, the other (above for an even
		// image row, below for an odd one; edges repeat) 1.
		near, far := row(y/2), row(y/2-1)
		if y%2 == 1 {
			far = row(y/2 + 1)
		}
		for i := range cw {
			sums[i] = int32(near[i])*3 + int32(far[i])
		}
		out[0] = uint8((sums[0]*4 + 8) >> 4)
		out[1] = uint8((sums[0]*3 + sums[1] + 7) >> 4)
		for i := 1; i < cw-1; i++ {
			out[2*i] = uint8((sums[i]*3 + sums[i-1] + 8) >> 4)
			out[2*i+1] = uint8((sums[i]*3 + sums[i+1] + 7) >> 4)
		}
		last := cw - 1
		out[2*last] = uint8((sums[last]*3 + sums[last-1] + 8) >> 4)
		out[2*last+1] = uint8((sums[last]*4 + 7) >> 4)
	}
	return func(y int, dst []uint8) {
		up(m.Cb, y, cb)
		up(m.Cr, y, cr)
		ys := m.Y[y*m.YStride:]
		for x := range w {
			yccToRGB(dst[x*3:], ys[x], cb[x], cr[x])
		}
	}, true
}
