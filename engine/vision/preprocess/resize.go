package preprocess

import "math"

// The resize is torchvision's F.resize(uint8 tensor, BICUBIC, antialias=True)
// on the CPU, which ATen runs in integers (UpSampleKernel.cpp, the uint8
// path after Pillow-SIMD's ImagingResample): per output pixel, float64
// weights of Keys' cubic (a = −0.5) stretched by the scale when shrinking,
// normalised to sum 1, then rounded to int16 at the largest precision that
// keeps twice the largest weight under 2¹⁵; each pass sums pixel·weight in
// int32 from half a unit, shifts the precision away and clamps to uint8;
// width first, then height, the intermediate stored as uint8.

// cubicA is Keys' parameter, the one PIL and ATen's antialiased bicubic use.
const cubicA = -0.5

// precisionMax bounds the weights' fixed-point bits, as ATen's loop does.
const precisionMax = 22

func cubic(x float64) float64 {
	x = math.Abs(x)
	switch {
	case x < 1:
		return ((cubicA+2)*x-(cubicA+3))*x*x + 1
	case x < 2:
		return ((cubicA*x-5*cubicA)*x+8*cubicA)*x - 4*cubicA
	}
	return 0
}

// taps are one axis' integer weights: output i reads size[i] inputs from
// start[i] with weights w[i·stride:].
type taps struct {
	start, size []int
	w           []int32
	stride      int
	prec        uint
}

func newTaps(in, out int) taps {
	scale := float64(in) / float64(out)
	support, invscale := 2.0, 1.0 // interp_size 4 / 2
	if scale >= 1 {
		support, invscale = 2*scale, 1/scale
	}
	stride := int(math.Ceil(support))*2 + 1
	t := taps{start: make([]int, out), size: make([]int, out), w: make([]int32, out*stride), stride: stride}
	wf := make([]float64, out*stride)
	wmax := 0.0
	for i := range out {
		center := scale * (float64(i) + 0.5)
		xmin := max(int(center-support+0.5), 0)
		xsize := min(max(min(int(center+support+0.5), in)-xmin, 0), stride)
		row := wf[i*stride : i*stride+xsize]
		total := 0.0
		for j := range row {
			row[j] = cubic((float64(j+xmin) - center + 0.5) * invscale)
			total += row[j]
		}
		if total != 0 {
			for j := range row {
				row[j] /= total
				wmax = max(wmax, row[j])
			}
		}
		t.start[i], t.size[i] = xmin, xsize
	}
	for t.prec = 0; t.prec < precisionMax; t.prec++ {
		if int(0.5+wmax*float64(int(1)<<(t.prec+1))) >= 1<<15 {
			break
		}
	}
	for i, v := range wf {
		v *= float64(int(1) << t.prec)
		if v < 0 {
			t.w[i] = int32(int(-0.5 + v))
		} else {
			t.w[i] = int32(int(0.5 + v))
		}
	}
	return t
}

func clampU8(s int32) uint8 {
	return uint8(min(max(s, 0), 255))
}

// resizeRGB resizes an image of RGB rows (row(y, dst) fills row y, 3 bytes
// a pixel) to outW x outH, interleaved RGB. A pass whose size does not
// change is skipped, as ATen skips it.
func resizeRGB(row func(y int, dst []uint8), inW, inH, outW, outH int) []uint8 {
	tmp := make([]uint8, inH*outW*3)
	if outW == inW {
		for y := range inH {
			row(y, tmp[y*inW*3:(y+1)*inW*3])
		}
	} else {
		t := newTaps(inW, outW)
		half := int32(1) << (t.prec - 1)
		src := make([]uint8, inW*3)
		for y := range inH {
			row(y, src)
			dst := tmp[y*outW*3:]
			for x := range outW {
				w := t.w[x*t.stride : x*t.stride+t.size[x]]
				in := src[t.start[x]*3:]
				for c := range 3 {
					s := half
					for k, wk := range w {
						s += int32(in[k*3+c]) * wk
					}
					dst[x*3+c] = clampU8(s >> t.prec)
				}
			}
		}
	}
	if outH == inH {
		return tmp
	}
	out := make([]uint8, outH*outW*3)
	t := newTaps(inH, outH)
	half := int32(1) << (t.prec - 1)
	stride := outW * 3
	for y := range outH {
		w := t.w[y*t.stride : y*t.stride+t.size[y]]
		base := t.start[y] * stride
		dst := out[y*stride : (y+1)*stride]
		for i := range dst {
			s := half
			for k, wk := range w {
				s += int32(tmp[base+k*stride+i]) * wk
			}
			dst[i] = clampU8(s >> t.prec)
		}
	}
	return out
}
