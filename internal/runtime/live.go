package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"petal/engine/chattemplate"
	"petal/engine/spec"
	"petal/internal/fit"
	"petal/internal/manage"
	"petal/internal/models"
	"petal/internal/prefixdisk"
	"petal/internal/service"
)

// liveModel is the model a server answers with, which the Setup screen
// replaces with the downloaded one without a restart: the new model is
// loaded beside the old, through the same memory-fit check as at start,
// and swapped into the slot every API server of the process reads.
type liveModel struct {
	slot *service.Slot
	// next is how a load opens a model: the backend, context, cache and
	// memory asked at start; its Dir is replaced by the download's.
	next  LoadRequest
	queue int
	// speculate is the service's Options.Speculate for every model loaded.
	speculate spec.Mode
	disk      *prefixdisk.Store // the prefix cache's disk tier, nil: none
	// downloads pulls the real model for the Setup screen, and names the
	// folder a load opens; shared by every handler of the process, so that
	// there is one download. Without it nothing can be loaded.
	downloads manage.Downloader
	// log receives what a load says (a lowered context, the cache).
	log io.Writer

	// loading is held while a load runs; a second one is refused.
	loading sync.Mutex
	mu      sync.Mutex
	dir     string // the served model's folder
}

// newLiveModel serves the service of the model l opened from dir, and
// frees both when they are replaced or the slot closes.
func newLiveModel(l Loaded, dir string, opts service.Options, next LoadRequest, downloads manage.Downloader, log io.Writer) (*liveModel, error) {
	svc, err := service.New(l.Model, dir, opts)
	if err != nil {
		l.Model.Close()
		return nil, err
	}
	m := &liveModel{next: next, queue: opts.QueueLimit, disk: opts.PrefixDisk, speculate: opts.Speculate, downloads: downloads, log: log, dir: dir}
	m.slot = service.NewSlot(svc, m.releaser(svc, l))
	return m, nil
}

// releaser frees a service and its model once the slot is done with them.
func (m *liveModel) releaser(svc *service.Service, l Loaded) func() {
	return func() {
		if err := errors.Join(svc.Close(), l.Model.Close()); err != nil {
			fmt.Fprintf(m.log, "closing the replaced model: %v\n", err)
		}
	}
}

// status is the served model as /manage/status reports it.
func (m *liveModel) status() manage.ModelStatus {
	m.mu.Lock()
	svc, dir := m.slot.Current(), m.dir
	m.mu.Unlock()
	info, run := svc.Info(), svc.Metrics()
	display := models.DisplayName(dir, info.Name)
	return manage.ModelStatus{Name: info.Name, DisplayName: display, State: manage.StateReady,
		ContextLength: info.ContextLength, Backend: m.next.Backend, Dir: dir,
		Demo: display == models.DemoDisplayName, Thinks: thinks(svc), Running: run.Running, Parallel: run.Parallel}
}

// thinkOpen is the tag a chat prompt ends with when the reply starts
// inside the model's reasoning.
const thinkOpen = "<think>"

// thinks reports whether svc's model thinks before answering when a
// request leaves thinking on: its chat template's prompt for a first
// message ends inside an open think block, the rule the service reads
// replies by. The demo's template closes the block at once: it never
// thinks. A model without a chat template has no chat to think in.
func thinks(svc *service.Service) bool {
	if !svc.Info().Chat {
		return false
	}
	first := &service.Request{Messages: []chattemplate.Message{{Role: "user", Content: chattemplate.TextContent("Hello")}}}
	tokens, err := svc.Tokens(context.Background(), first)
	if err != nil {
		return false
	}
	return strings.HasSuffix(strings.TrimRight(svc.Tokenizer().Decode(tokens), " \t\r\n"), thinkOpen)
}

// load serves the downloaded model in place of the current one. A model
// already served is not loaded again. It is not cancelled with its
// request: a half-loaded model would only be thrown away.
func (m *liveModel) load(context.Context) error {
	if !m.loading.TryLock() {
		return manage.ErrLoadBusy
	}
	defer m.loading.Unlock()
	d := m.downloads.Status()
	if d.State != manage.DownloadDone || d.Dir == "" {
		return fmt.Errorf("%w: the download is %s (download it, or verify it again, first)", manage.ErrNotDownloaded, d.State)
	}
	m.mu.Lock()
	same := m.dir == d.Dir
	m.mu.Unlock()
	if same {
		return nil
	}
	req := m.next
	req.Dir = d.Dir
	var notes strings.Builder
	l, err := Load(req, &notes)
	io.WriteString(m.log, notes.String())
	if errors.Is(err, fit.ErrDoesNotFit) {
		return fmt.Errorf("%w: %w", manage.ErrDoesNotFit, err)
	}
	if err != nil {
		return err
	}
	svc, err := service.New(l.Model, d.Dir, service.Options{ContextLength: l.Context, QueueLimit: m.queue, CacheBytes: l.CacheBytes, Parallel: l.Parallel, PrefixDisk: m.disk, Speculate: m.speculate})
	if err != nil {
		l.Model.Close()
		return err
	}
	m.mu.Lock()
	m.dir = d.Dir
	m.slot.Swap(svc, m.releaser(svc, l))
	m.mu.Unlock()
	info := svc.Info()
	fmt.Fprintf(m.log, "loaded %s (context %d tokens, %s) from %s; %s\n", info.Name, info.ContextLength, DescribeParallel(l.Parallel), d.Dir, DescribeCache(l, req.CacheBytes))
	return nil
}
