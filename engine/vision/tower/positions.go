package tower

import (
	"math"

	"petal/engine/checkpoint"
	"petal/engine/vision/preprocess"
)

// The host-side tables of the tower's position signals, exported so that
// a device tower (engine/gpumodel) computes them in the same fp32 steps as
// this reference and uploads them.

// InvFreq is the 2D rotary's inverse frequencies, head_dim/4 of them:
// inv_freq = 1 / theta^(arange(0, dim, 2) / dim) over dim = head_dim/2, in
// float32 as transformers holds it.
func InvFreq(c *checkpoint.VisionConfig) []float32 {
	dim := c.HeadDim() / 2
	inv := make([]float32, dim/2)
	for j := range inv {
		inv[j] = float32(1 / math.Pow(ropeTheta, float64(2*j)/float64(dim)))
	}
	return inv
}

// blockCell is where patch p of a frame in the pixel values' merge-block
// order (blocks of merge² patches, row-major within and across blocks)
// sits in the frame's grid of w columns.
func blockCell(p, merge, w int) (row, col int) {
	blk, in := p/(merge*merge), p%(merge*merge)
	return (blk/(w/merge))*merge + in/merge, (blk%(w/merge))*merge + in%merge
}

// linspace is torch.linspace(0, end, steps) in float32: the first half
// counted up from the start, the rest down from the end, as ATen does.
func linspace(end float32, steps int) []float32 {
	out := make([]float32, steps)
	if steps == 1 {
		return out
	}
	step := end / float32(steps-1)
	half := steps / 2
	for i := range out {
		if i < half {
			out[i] = step * float32(i)
		} else {
			out[i] = end - step*float32(steps-i-1)
		}
	}
	return out
}

// AddPositions adds the learned position table pos ([Positions][Hidden]),
// bilinearly interpolated from its Side² grid to the image's h×w patches
// (fast_pos_embed_interpolate: corners at linspace(0, side-1), weights in
// float32), to each patch row of x ([patches][Hidden]) in the pixel
// values' merge-block order, every frame alike. Into a zeroed x it writes
// the interpolated table itself.
func AddPositions(x, pos []float32, c *checkpoint.VisionConfig, g preprocess.Grid) {
	h, side, m := c.Hidden, c.Side(), c.Merge
	hs, ws := linspace(float32(side-1), g.H), linspace(float32(side-1), g.W)
	corner := func(v float32) (lo, hi int, d float32) {
		lo = int(v)
		return lo, min(lo+1, side-1), v - float32(lo)
	}
	frame := g.H * g.W
	parallel(frame, rowsPerJob, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			r, col := blockCell(p, m, g.W)
			h0, h1, dh := corner(hs[r])
			w0, w1, dw := corner(ws[col])
			wts := [4]float32{(1 - dh) * (1 - dw), (1 - dh) * dw, dh * (1 - dw), dh * dw}
			idx := [4]int{h0*side + w0, h0*side + w1, h1*side + w0, h1*side + w1}
			for j := 0; j < h; j++ {
				v := pos[idx[0]*h+j]*wts[0] + pos[idx[1]*h+j]*wts[1]
				v = v + pos[idx[2]*h+j]*wts[2]
				v = v + pos[idx[3]*h+j]*wts[3]
				for f := 0; f < g.T; f++ {
					x[(f*frame+p)*h+j] += v
				}
			}
		}
	})
}

// Rotary is the cos and sin of each patch's 2D rotary angles, len(inv)*2
// a patch (head_dim/2): its row times the inverse frequencies inv, then
// its column times them (rot_pos_emb), for one frame in merge-block order
// (every frame has the same).
func Rotary(inv []float32, merge int, g preprocess.Grid) (cos, sin []float32) {
	q := len(inv)
	frame := g.H * g.W
	cos, sin = make([]float32, frame*2*q), make([]float32, frame*2*q)
	for p := 0; p < frame; p++ {
		r, col := blockCell(p, merge, g.W)
		for j, f := range inv {
			for k, pos := range [2]int{r, col} {
				ang := float64(float32(pos) * f)
				cos[p*2*q+k*q+j] = float32(math.Cos(ang))
				sin[p*2*q+k*q+j] = float32(math.Sin(ang))
			}
		}
	}
	return cos, sin
}
