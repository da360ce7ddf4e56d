package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"

	"petal/engine"
	"petal/engine/backend"
	"petal/engine/checkpoint"
	"petal/gpu"
	"petal/internal/fit"
	"petal/internal/service"
)

// budgets gives the memory a model may use on the backends whose memory is
// the host's: the CPU backend's, and the simulator's, whose device memory
// is this machine's. Any other GPU backend's budget is its device's own
// working set (fit.Device of the device the model will run on); a backend
// with neither (the tests' scripted models) loads unchecked.
var budgets = map[string]func() (fit.Budget, error){
	"cpu": fit.Host,
	"sim": fit.Host,
}

// Loaded is a model opened after the memory-fit check, with the service
// settings the check decided.
type Loaded struct {
	Model engine.Model
	// Context is the context length to serve: the asked one, or the
	// largest that fits; 0 (the model's own) when the load was unchecked.
	Context int
	// CacheBytes is the prefix cache's budget as service.Options takes it
	// (negative: off).
	CacheBytes int64
	// Parallel is how many requests decode together (service.Options'):
	// the asked number, else what the check left room for
	// (fit.AutoParallel), else 1 when the load was unchecked.
	Parallel int
	// Report is the check at the chosen context; nil when unchecked.
	Report *fit.Report
	// device is the GPU's description when the budget was its own.
	device *gpu.Info
}

// LoadRequest is what Load is asked to load.
type LoadRequest struct {
	Dir, Backend string
	// Context is the context length to serve (0: the model's maximum).
	Context int
	// CacheBytes is the prefix cache asked for (0 or less: none).
	CacheBytes int64
	// MemoryGB, when set, checks the fit as on a Mac with this much memory
	// instead of the budget the machine reports.
	MemoryGB float64
	// Parallel is how many requests decode together, 1 to
	// service.MaxParallel; 0 leaves it to the memory-fit check.
	Parallel int
	// NoDrafts: replies never draft with the model's MTP head
	// (--speculative off), so the check counts no memory for drafting.
	NoDrafts bool
}

// Load opens the checkpoint in req.Dir on req.Backend once the
// memory-fit check has passed: at req.Context tokens of context, or, when
// only a shorter context fits, at the largest that does, which it says on
// w. A model that does not fit at all is refused with a *fit.NoFitError.
// Up to req.Parallel requests decode together, or as many as the memory
// left at that context holds (at most fit.MaxAutoParallel). The prefix
// cache gets req.CacheBytes, but never more than the memory the check and
// those requests leave.
func Load(req LoadRequest, w io.Writer) (Loaded, error) {
	dir, name, cacheBytes := req.Dir, req.Backend, req.CacheBytes
	if req.Parallel < 0 || req.Parallel > service.MaxParallel {
		return Loaded{}, fmt.Errorf("runtime: %d requests at once is outside 1..%d", req.Parallel, service.MaxParallel)
	}
	budget, onHost := budgets[name]
	if !onHost && !backend.HasDevice(name) {
		m, err := OpenModel(dir, name)
		if err != nil {
			return Loaded{}, err
		}
		if cacheBytes <= 0 {
			cacheBytes = -1
		}
		return Loaded{Model: m, Context: req.Context, CacheBytes: cacheBytes, Parallel: max(1, req.Parallel)}, nil
	}
	if err := CheckDir(dir); err != nil {
		return Loaded{}, err
	}
	fm, err := fit.FromCheckpoint(dir)
	if err != nil {
		return Loaded{}, fmt.Errorf("memory-fit check of %s: %w", dir, err)
	}
	var dev gpu.Device
	var info *gpu.Info
	if !onHost {
		// The device is opened to be asked its budget, and the model is
		// loaded on it once the check has passed.
		if dev, _, err = backend.OpenDevice(name); err != nil {
			return Loaded{}, err
		}
		i := dev.Info()
		info = &i
		budget = func() (fit.Budget, error) { return fit.Device(i) }
	}
	l, err := check(fm, req, budget, w)
	if err != nil {
		if dev != nil {
			dev.Close()
		}
		return Loaded{}, err
	}
	if dev != nil {
		l.Model, err = backend.OnDevice(dev, dir)
	} else {
		l.Model, err = OpenModel(dir, name)
	}
	if err != nil {
		return Loaded{}, err
	}
	l.device = info
	return l, nil
}

// budget is where the Setup screen's verdict takes this machine's memory
// from: the GPU l runs on, when its budget was the device's own (asked
// once, at the load); else the host's, now.
func (l Loaded) budget() func() (fit.Budget, error) {
	if l.device == nil {
		return fit.Host
	}
	info := *l.device
	return func() (fit.Budget, error) { return fit.Device(info) }
}

// check runs the memory-fit check of fm as req asks, on budget (or the
// simulated Mac req names), and says on w when the context was lowered.
func check(fm fit.Model, req LoadRequest, budget func() (fit.Budget, error), w io.Writer) (Loaded, error) {
	if req.MemoryGB != 0 {
		budget = func() (fit.Budget, error) { return fit.SimulatedMac(req.MemoryGB) }
	}
	asked := req.Context
	if asked == 0 {
		asked = modelContext(fm.Config)
	}
	b, err := budget()
	if err != nil {
		return Loaded{}, err
	}
	r, err := fit.ForLoad(fm, b, fit.Request{Context: asked, CachedSessions: fit.DefaultCachedSessions, NoDrafts: req.NoDrafts})
	if err != nil {
		return Loaded{}, err
	}
	if r.Context < asked {
		fmt.Fprintf(w, "context lowered from %d to %d tokens, the largest that fits %s (%s): %s\n",
			asked, r.Context, fit.FormatBytes(b.Bytes), b.Source, r.Advice)
	}
	parallel := req.Parallel
	if parallel == 0 {
		parallel = fit.AutoParallel(r)
	}
	extra := fit.ParallelBytes(r, parallel)
	if extra > r.HeadroomBytes {
		// Asked for by name: served as asked, since sequences hold their
		// whole context only once their replies grow that long.
		fmt.Fprintf(w, "note: %d requests together need %s more for their caches at %d tokens of context than the %s left beside the model; the memory may run out when they all grow that long\n",
			parallel, fit.FormatBytes(extra-r.HeadroomBytes), r.Context, fit.FormatBytes(r.HeadroomBytes))
	}
	return Loaded{Context: r.Context, CacheBytes: cacheBudget(req.CacheBytes, r.HeadroomBytes-extra), Parallel: parallel, Report: &r}, nil
}

// OpenModel opens dir's model on the backend called name, once the folder
// has been checked.
func OpenModel(dir, name string) (engine.Model, error) {
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	return backend.Open(name, dir)
}

// CheckDir says plainly that the model folder (--model) is missing or
// names no folder, before anything reads the folder's files and words it
// as their fault.
func CheckDir(dir string) error {
	if dir == "" {
		return errors.New("--model DIR is required")
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--model %s: no such folder", dir)
	case err != nil:
		return fmt.Errorf("--model %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("--model %s: not a folder (name the checkpoint's folder)", dir)
	}
	return nil
}

// modelContext is the context a service gives cfg when asked for none.
func modelContext(cfg *checkpoint.Config) int {
	if cfg.MaxPositions > 0 {
		return cfg.MaxPositions
	}
	return service.DefaultContext
}

// cacheBudget is the prefix cache's budget, as service.Options takes it,
// for a cache asked to hold requested bytes (0 or less: none) on a machine
// with headroom bytes left beside the model at its context. The cached
// sequences live in that headroom, so it bounds them.
func cacheBudget(requested, headroom int64) int64 {
	n := min(requested, headroom)
	if n <= 0 {
		return -1
	}
	return n
}

// DescribeCache says what the prefix cache got, for the startup lines.
func DescribeCache(l Loaded, requested int64) string {
	switch {
	case l.CacheBytes <= 0 && requested <= 0:
		return "prefix cache: off"
	case l.CacheBytes <= 0:
		return fmt.Sprintf("prefix cache: off, no memory is left beside the model and %s at %d tokens of context", requestWords(l.Parallel), l.Context)
	case l.Report != nil && l.CacheBytes < requested:
		return fmt.Sprintf("prefix cache: %s, the memory left beside the model and %s at %d tokens of context (%s asked)",
			mibString(l.CacheBytes), requestWords(l.Parallel), l.Context, mibString(requested))
	}
	return "prefix cache: " + mibString(l.CacheBytes)
}

// DescribeParallel says how many requests decode together, for the line
// that names the model served.
func DescribeParallel(n int) string {
	if n <= 1 {
		return "one request at a time"
	}
	return fmt.Sprintf("decoding up to %d requests together", n)
}

// requestWords names the requests decoding together beside the model.
func requestWords(n int) string {
	if n <= 1 {
		return "one request"
	}
	return fmt.Sprintf("%d requests", n)
}

func mibString(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
