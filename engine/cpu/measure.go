package cpu

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"time"
)

// The product MeasureDecodeRead times: the largest of the 35B model's decode
// step (8192x2048, 4-bit codes in groups of 64), which BenchmarkQMV also
// times, so a token's weight reads go at about its rate.
const (
	measureRows  = 8192
	measureCols  = 2048
	measureBits  = 4
	measureGroup = 64
)

// measureColdBytes is how much weight memory MeasureDecodeRead cycles
// through: decode reads each weight once a token, from memory rather than
// a cache, so the copies together outgrow the last-level cache of the
// machines Petal runs on (a few to 128 MiB) several times.
const measureColdBytes = 256 << 20

// measureMinTime is the least MeasureDecodeRead accepts: shorter runs time
// a few products, and a core lent elsewhere for a millisecond swings them.
const measureMinTime = 100 * time.Millisecond

// measureWindows is how many equal windows MeasureDecodeRead splits its
// time into; it returns their median rate, so that a window in which
// another program took a core or the memory bus moves the result little.
const measureWindows = 5

// ErrMeasureTime is MeasureDecodeRead's refusal of a run shorter than
// measureMinTime.
var ErrMeasureTime = errors.New("cpu: a decode measurement needs at least 100 ms")

// MeasureDecodeRead times this machine's decode product for about d, on
// every core as decode runs it, and returns the weight bytes it read per
// second (the median of measureWindows windows): a decode step bound by its
// weight reads makes that many bytes a second into tokens. It allocates measureColdBytes for the while and stops
// early, with ctx's error, once ctx is done.
func MeasureDecodeRead(ctx context.Context, d time.Duration) (float64, error) {
	if d < measureMinTime {
		return 0, ErrMeasureTime
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ms := coldCopies()
	defer debug.FreeOSMemory() // hand the copies back: a server holds a model beside them
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, measureCols)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	out := make([]float32, measureRows)
	sc := newScratch()
	size := ms[0].bytes()
	// One untimed pass wakes the workers and faults every page in.
	for _, m := range ms {
		m.mul(sc, 0, x, 1, out)
	}
	rates := make([]float64, measureWindows)
	next := 0
	for w := range rates {
		n, start := 0, time.Now()
		for time.Since(start) < d/measureWindows {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			ms[next%len(ms)].mul(sc, 0, x, 1, out)
			n, next = n+1, next+1
		}
		rates[w] = float64(n) * float64(size) / time.Since(start).Seconds()
	}
	slices.Sort(rates)
	return rates[measureWindows/2], nil
}

// coldCopies are copies of one random 4-bit matrix of the measured shape,
// measureColdBytes in all. The codes are random; the scales are small and
// the biases zero, so the products stay finite as real weights do.
func coldCopies() []*matrix {
	r := rand.New(rand.NewPCG(3, 4))
	first := &matrix{rows: measureRows, cols: measureCols, bits: measureBits, group: measureGroup,
		words:  make([]uint32, measureRows*measureCols*measureBits/32),
		scales: make([]uint16, measureRows*measureCols/measureGroup),
		biases: make([]uint16, measureRows*measureCols/measureGroup)}
	for i := range first.words {
		first.words[i] = r.Uint32()
	}
	const scale = 0x3c23 // bf16 0.00995: codes 0-15 times it, as a trained layer's weights are small
	for i := range first.scales {
		first.scales[i] = scale
	}
	ms := make([]*matrix, max(1, measureColdBytes/first.bytes()))
	ms[0] = first
	for i := 1; i < len(ms); i++ {
		m := *first
		m.words = append([]uint32(nil), first.words...)
		m.scales = append([]uint16(nil), first.scales...)
		m.biases = append([]uint16(nil), first.biases...)
		ms[i] = &m
	}
	return ms
}

// bytes is what one product with a quantized m reads of its weights.
func (m *matrix) bytes() int { return 4*len(m.words) + 2*len(m.scales) + 2*len(m.biases) }
