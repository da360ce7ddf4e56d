package main

import (
	"fmt"
	"io"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/internal/fit"
	"petal/internal/service"
)

// budgets gives, per backend, the memory a model on it may use: Metal's
// working set on the GPU, the card's free memory for CUDA; the memory the
// OS reports available for the CPU backend and for the simulator, whose
// device memory is this machine's.
// A backend without one (the tests' scripted models) loads unchecked.
var budgets = map[string]func() (fit.Budget, error){
	"cpu":   fit.Host,
	"sim":   fit.Host,
	"metal": fit.Metal,
	"cuda":  fit.CUDA,
}

// loaded is a model opened after the memory-fit check, with the service
// settings the check decided.
type loaded struct {
	model engine.Model
	// context is the context length to serve: the asked one, or the
	// largest that fits; 0 (the model's own) when the load was unchecked.
	context int
	// cacheBytes is the prefix cache's budget as service.Options takes it
	// (negative: off).
	cacheBytes int64
	// report is the check at the chosen context; nil when unchecked.
	report *fit.Report
}

// loadRequest is what loadModel is asked to load.
type loadRequest struct {
	Dir, Backend string
	// Context is the context length to serve (0: the model's maximum).
	Context int
	// CacheBytes is the prefix cache asked for (0 or less: none).
	CacheBytes int64
	// MemoryGB, when set, checks the fit as on a Mac with this much memory
	// instead of the budget the machine reports.
	MemoryGB float64
}

// loadModel opens the checkpoint in req.Dir on req.Backend once the
// memory-fit check has passed: at req.Context tokens of context, or, when
// only a shorter context fits, at the largest that does, which it says on
// w. A model that does not fit at all is refused with a *fit.NoFitError.
// The prefix cache gets req.CacheBytes, but never more than the memory the
// check leaves at the chosen context.
func loadModel(req loadRequest, w io.Writer) (loaded, error) {
	dir, backend, cacheBytes := req.Dir, req.Backend, req.CacheBytes
	budget, checked := budgets[backend]
	if !checked {
		m, err := openModel(dir, backend)
		if err != nil {
			return loaded{}, err
		}
		if cacheBytes <= 0 {
			cacheBytes = -1
		}
		return loaded{model: m, context: req.Context, cacheBytes: cacheBytes}, nil
	}
	if req.MemoryGB != 0 {
		budget = func() (fit.Budget, error) { return fit.SimulatedMac(req.MemoryGB) }
	}
	if err := checkModelDir(dir); err != nil {
		return loaded{}, err
	}
	fm, err := fit.FromCheckpoint(dir)
	if err != nil {
		return loaded{}, fmt.Errorf("memory-fit check of %s: %w", dir, err)
	}
	asked := req.Context
	if asked == 0 {
		asked = modelContext(fm.Config)
	}
	b, err := budget()
	if err != nil {
		return loaded{}, err
	}
	r, err := fit.ForLoad(fm, b, fit.Request{Context: asked, CachedSessions: fit.DefaultCachedSessions})
	if err != nil {
		return loaded{}, err
	}
	if r.Context < asked {
		fmt.Fprintf(w, "context lowered from %d to %d tokens, the largest that fits %s (%s): %s\n",
			asked, r.Context, gibString(b.Bytes), b.Source, r.Advice)
	}
	m, err := openModel(dir, backend)
	if err != nil {
		return loaded{}, err
	}
	return loaded{model: m, context: r.Context, cacheBytes: cacheBudget(cacheBytes, r.HeadroomBytes), report: &r}, nil
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

// describeCache says what the prefix cache got, for the startup lines.
func describeCache(l loaded, requested int64) string {
	switch {
	case l.cacheBytes <= 0 && requested <= 0:
		return "prefix cache: off"
	case l.cacheBytes <= 0:
		return fmt.Sprintf("prefix cache: off, no memory is left beside the model at %d tokens of context", l.context)
	case l.report != nil && l.cacheBytes < requested:
		return fmt.Sprintf("prefix cache: %s, the memory left beside the model at %d tokens of context (%s asked)",
			mibString(l.cacheBytes), l.context, mibString(requested))
	}
	return "prefix cache: " + mibString(l.cacheBytes)
}

func gibString(n int64) string { return fmt.Sprintf("%.2f GiB", float64(n)/fit.GiB) }

func mibString(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
