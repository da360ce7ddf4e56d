package tower

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"petal/engine/vision/preprocess"
)

// rowsPerJob is how many input rows one job of a product takes: four
// rows share each weight row read (dot4).
const rowsPerJob = 16

// parallel runs fn over [0, n) in ranges of grain, on as many goroutines
// as there are cores, and waits for them.
func parallel(n, grain int, fn func(lo, hi int)) {
	jobs := (n + grain - 1) / grain
	workers := min(runtime.GOMAXPROCS(0), jobs)
	if workers <= 1 {
		fn(0, n)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := int(next.Add(1)) - 1
				if j >= jobs {
					return
				}
				fn(j*grain, min((j+1)*grain, n))
			}
		}()
	}
	wg.Wait()
}

// Kernels are the tower's inner loops, which a backend may run with its
// own ([Tower.SetKernels]); the tower's own are plain Go.
type Kernels interface {
	// MatMul computes out[i·rows+o] = w[o·cols:][:cols] · x[i·cols:][:cols]
	// for i < n, o < rows.
	MatMul(w []float32, rows, cols int, x []float32, n int, out []float32)
	// ExpShift sets s[i] = exp(s[i] - shift) and returns their sum.
	ExpShift(s []float32, shift float32) float32
}

// goKernels are the tower's own Kernels.
type goKernels struct{}

func (goKernels) ExpShift(s []float32, shift float32) float32 {
	var sum float32
	for i, v := range s {
		e := float32(math.Exp(float64(v - shift)))
		s[i] = e
		sum += e
	}
	return sum
}

// apply computes y = W x + b for n input rows of x into out, rows of
// d.rows.
func (d *dense) apply(k Kernels, x []float32, n int, out []float32) {
	k.MatMul(d.w, d.rows, d.cols, x, n, out)
	parallel(n, rowsPerJob, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			add(out[i*d.rows:(i+1)*d.rows], d.b)
		}
	})
}

// MatMul runs in Go in parallel over the input rows.
func (goKernels) MatMul(w []float32, rows, cols int, x []float32, n int, out []float32) {
	d := &dense{rows: rows, cols: cols, w: w}
	parallel(n, rowsPerJob, func(lo, hi int) {
		k := d.cols
		i := lo
		for ; i+4 <= hi; i += 4 {
			x0, x1, x2, x3 := x[i*k:(i+1)*k], x[(i+1)*k:(i+2)*k], x[(i+2)*k:(i+3)*k], x[(i+3)*k:(i+4)*k]
			for o := 0; o < d.rows; o++ {
				s := dot4(d.w[o*k:(o+1)*k], x0, x1, x2, x3)
				for j := range 4 {
					out[(i+j)*d.rows+o] = s[j]
				}
			}
		}
		for ; i < hi; i++ {
			xi := x[i*k : (i+1)*k]
			for o := 0; o < d.rows; o++ {
				out[i*d.rows+o] = dot(d.w[o*k:(o+1)*k], xi)
			}
		}
	})
}

// dot4 is w · x_j for four rows x_j of len(w).
func dot4(w, x0, x1, x2, x3 []float32) [4]float32 {
	n := len(w)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	var s0, s1, s2, s3 float32
	for k, v := range w {
		s0 += v * x0[k]
		s1 += v * x1[k]
		s2 += v * x2[k]
		s3 += v * x3[k]
	}
	return [4]float32{s0, s1, s2, s3}
}

func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for k, v := range a {
		s += v * b[k]
	}
	return s
}

// attnQueries is how many queries of one head take their scores at once:
// the scores of a frame of the largest image would not fit otherwise
// (65,536² floats).
const attnQueries = 256

// attention rotates the queries and keys of qkv ([patches][q | k | v],
// each heads x head_dim) in place and writes softmax(q kᵀ / √d) v of each
// frame's patches (every patch sees every patch of its frame) into out,
// [patches][heads x head_dim]: per frame and head, the scores of a block
// of queries as one product, their softmax, and their values as another.
func (t *Tower) attention(qkv, out []float32, g preprocess.Grid, cos, sin []float32) {
	c := &t.cfg
	n, h, nh, d := g.Patches(), c.Hidden, c.Heads, c.HeadDim()
	frame, half := g.H*g.W, d/2
	parallel(n, rowsPerJob, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			cs, sn := cos[(p%frame)*half:][:half], sin[(p%frame)*half:][:half]
			for part := 0; part < 2; part++ {
				for hd := 0; hd < nh; hd++ {
					v := qkv[p*3*h+part*h+hd*d:][:d]
					for i := 0; i < half; i++ {
						a, b := v[i], v[i+half]
						v[i] = a*cs[i] - b*sn[i]
						v[i+half] = b*cs[i] + a*sn[i]
					}
				}
			}
		}
	})
	scale := float32(1 / math.Sqrt(float64(d)))
	q, k, vt := make([]float32, frame*d), make([]float32, frame*d), make([]float32, d*frame)
	nq := min(attnQueries, frame)
	scores, o := make([]float32, nq*frame), make([]float32, nq*d)
	for f := 0; f < g.T; f++ {
		for hd := 0; hd < nh; hd++ {
			for p := 0; p < frame; p++ {
				row := qkv[(f*frame+p)*3*h+hd*d:]
				copy(q[p*d:(p+1)*d], row[:d])
				copy(k[p*d:(p+1)*d], row[h:h+d])
				for i, x := range row[2*h : 2*h+d] {
					vt[i*frame+p] = x
				}
			}
			for q0 := 0; q0 < frame; q0 += nq {
				b := min(nq, frame-q0)
				t.k.MatMul(k, frame, d, q[q0*d:], b, scores)
				parallel(b, 1, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						s := scores[i*frame : (i+1)*frame]
						best := float32(math.Inf(-1))
						for j := range s {
							s[j] *= scale
							best = max(best, s[j])
						}
						inv := 1 / t.k.ExpShift(s, best)
						for j := range s {
							s[j] *= inv
						}
					}
				})
				t.k.MatMul(vt, d, frame, scores, b, o)
				for i := 0; i < b; i++ {
					copy(out[(f*frame+q0+i)*h+hd*d:][:d], o[i*d:(i+1)*d])
				}
			}
		}
	}
}
