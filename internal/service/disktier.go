package service

import (
	"io"
	"slices"

	"petal/engine"
	"petal/internal/prefixdisk"
)

// diskTier is the prefix cache's disk tier for one model: behind the memory
// tier, it restores what the memory tier does not hold, also after a
// restart.
type diskTier struct {
	store  *prefixdisk.Store
	model  prefixdisk.ModelID
	loader engine.StateLoader
}

// newDiskTier returns the tier of model served from dir, or nil when there
// is no store or the backend cannot save its sequences.
func newDiskTier(store *prefixdisk.Store, model engine.Model, dir string) (*diskTier, error) {
	loader, ok := model.(engine.StateLoader)
	if store == nil || !ok {
		return nil, nil
	}
	id, err := prefixdisk.CheckpointIdentity(dir)
	if err != nil {
		return nil, err
	}
	return &diskTier{store: store, model: prefixdisk.NewModelID(id, loader.StateClass()), loader: loader}, nil
}

// get restores the longest saved prefix of tokens longer than shorter
// tokens; nil when none is.
func (d *diskTier) get(tokens []int, shorter int) (engine.Sequence, int) {
	if d == nil {
		return nil, 0
	}
	return prefixdisk.Load(d.store, d.model, tokens, shorter, d.loader.LoadState)
}

// put queues a copy of seq, the state after tokens, to be written in the
// background; nothing is copied when the file exists or the queue is full.
func (d *diskTier) put(tokens []int, seq engine.Sequence) {
	if d == nil || len(tokens) == 0 || slices.ContainsFunc(tokens, isImageKey) {
		// A sequence holding images is not saved (cacheKey).
		return
	}
	if _, ok := seq.(engine.StateSaver); !ok || !d.store.Room() || d.store.Has(d.model, tokens) {
		return
	}
	f, err := seq.Fork()
	if err != nil {
		return // the cache is an optimisation; the generation goes on
	}
	saver, ok := f.(engine.StateSaver)
	if !ok {
		f.Close()
		return
	}
	d.store.Save(d.model, tokens, func(w io.Writer) error { return saver.SaveState(w) }, func() { f.Close() })
}
