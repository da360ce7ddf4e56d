package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// visionBlockRows is how many input rows one job of visionMatMul takes:
// its rows (a few hundred KB at the tower's widths) stay in the core's
// cache while every weight row passes once.
const visionBlockRows = 48

// visionKernels run the vision tower's inner loops (tower.Kernels) on the
// CPU's vector kernels.
type visionKernels struct{}

// ExpShift is expShift.
func (visionKernels) ExpShift(s []float32, shift float32) float32 { return expShift(s, shift) }

// MatMul is out[i·rows+o] = w_o · x_i, four weight rows by three input
// rows per kernel call, jobs of visionBlockRows input rows spread over the
// cores.
func (visionKernels) MatMul(w []float32, rows, cols int, x []float32, n int, out []float32) {
	jobs := (n + visionBlockRows - 1) / visionBlockRows
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), jobs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tile [12]float32
			for {
				j := int(next.Add(1)) - 1
				if j >= jobs {
					return
				}
				lo, hi := j*visionBlockRows, min((j+1)*visionBlockRows, n)
				o := 0
				for ; o+4 <= rows; o += 4 {
					i := lo
					for ; i+3 <= hi && dot4x3Vec(w[o*cols:], cols, x[i*cols:], cols, cols, &tile); i += 3 {
						for jj := range 3 {
							copy(out[(i+jj)*rows+o:][:4], tile[4*jj:4*jj+4])
						}
					}
					for ; i < hi; i++ {
						for k := range 4 {
							out[i*rows+o+k] = dot(w[(o+k)*cols:(o+k+1)*cols], x[i*cols:(i+1)*cols])
						}
					}
				}
				for ; o < rows; o++ {
					for i := lo; i < hi; i++ {
						out[i*rows+o] = dot(w[o*cols:(o+1)*cols], x[i*cols:(i+1)*cols])
					}
				}
			}
		}()
	}
	wg.Wait()
}
