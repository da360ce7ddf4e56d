package cuda

import (
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"
)

// profile is what $PETAL_CUDA_PROFILE=1 collects: every launch bracketed by
// timing events (which costs a little GPU time of its own), and the host
// time spent launching. Close prints it to stderr, per kernel: calls, GPU
// time in all and per call, and what NVRTC made of it.
type profile struct {
	mu       sync.Mutex
	kernels  map[string]*kernelStat
	host     time.Duration // in the launch loops
	launches int
	buffers  int
}

type kernelStat struct {
	fn    uintptr
	calls int
	gpu   time.Duration
}

func newProfile() *profile {
	if os.Getenv("PETAL_CUDA_PROFILE") != "1" {
		return nil
	}
	return &profile{kernels: map[string]*kernelStat{}}
}

// timings records an event before the first launch (call it first) and
// after each; done turns them into per-kernel times.
type timings struct {
	events []uintptr
	names  []string
	fns    []uintptr
}

func (p *profile) add(t *timings, d *Device, host time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.host += host
	p.launches += len(t.names)
	p.buffers++
	for i, name := range t.names {
		var ms float32
		if d.api.cuEventElapsedTime(&ms, t.events[i], t.events[i+1]) != cudaSuccess {
			continue
		}
		k := p.kernels[name]
		if k == nil {
			k = &kernelStat{fn: t.fns[i]}
			p.kernels[name] = k
		}
		k.calls++
		k.gpu += time.Duration(float64(ms) * float64(time.Millisecond))
	}
}

func (p *profile) print(w io.Writer, d *Device) {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := make([]string, 0, len(p.kernels))
	var total time.Duration
	for n, k := range p.kernels {
		names = append(names, n)
		total += k.gpu
	}
	sort.Slice(names, func(a, b int) bool { return p.kernels[names[a]].gpu > p.kernels[names[b]].gpu })
	fmt.Fprintf(w, "cuda profile: %d command buffers, %d launches, host launch time %.2f us per launch, GPU time %.3f s\n",
		p.buffers, p.launches, float64(p.host.Microseconds())/float64(max(p.launches, 1)), total.Seconds())
	for _, n := range names {
		k := p.kernels[n]
		fmt.Fprintf(w, "cuda profile: %-34s %7d calls %10.3f ms %9.2f us/call %5.1f%%  %s\n", n, k.calls,
			float64(k.gpu.Microseconds())/1e3, float64(k.gpu.Nanoseconds())/1e3/float64(k.calls),
			100*k.gpu.Seconds()/max(total.Seconds(), 1e-9), d.describe(k.fn))
	}
}
