package hub

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"petal/engine/safetensors"
)

// A pull can fetch some tensors of another repository without its shards:
// the original bf16 checkpoint's MTP head (issue 32) or vision tower
// (issue 34), which the 4-bit MLX checkpoint drops. The original's index
// names the shard of each tensor; two range requests read a shard's header
// (its length, then the JSON), and one more per run of adjacent wanted
// tensors fetches their bytes. The Hub's sha256 covers whole files only,
// so each tensor is checked against a pinned manifest of per-tensor
// hashes committed in the repository ([TensorManifest]); without one
// nothing is fetched.

// Limits and names of a tensor fetch.
const (
	// maxIndexBytes bounds a model.safetensors.index.json read (the 35B's
	// is about 2 MB).
	maxIndexBytes = 32 << 20
	// indexName is the file naming each tensor's shard; a repository
	// without one has its tensors in singleShard.
	indexName   = "model.safetensors.index.json"
	singleShard = "model.safetensors"
	// rawName holds, in a tensor fetch's staging folder, the wanted
	// ranges back to back; tensorStateName what of them is on disk.
	rawName         = "tensors.raw"
	tensorStateName = "state.json"
	// TensorManifestFormat is the format number a pinned manifest carries.
	TensorManifestFormat = 1
)

// TensorFilter picks tensors of a checkpoint by name.
type TensorFilter struct {
	// Name says what the tensors are ("mtp", "vision"): it names the
	// pinned manifest and the staging folder.
	Name string
	// Prefixes: a tensor whose name starts with one is wanted.
	Prefixes []string
}

// The filters Petal fetches with.
var (
	MTPTensors    = TensorFilter{Name: "mtp", Prefixes: []string{"mtp."}}
	VisionTensors = TensorFilter{Name: "vision", Prefixes: []string{"model.visual.", "visual.", "vision_tower."}}
)

// Match reports whether the filter wants the tensor called name.
func (f TensorFilter) Match(name string) bool {
	for _, p := range f.Prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// TensorManifest pins the tensors a filter picks from a repository at one
// commit: each tensor's shard, dtype, shape and the sha256 of its bytes.
// It is JSON, written once by `go run ./tools/tensormanifest` from the
// real files and committed under internal/hub/pinned.
type TensorManifest struct {
	Format  int            `json:"format"`
	Repo    string         `json:"repo"`
	SHA     string         `json:"sha"`
	Filter  string         `json:"filter"`
	Tensors []PinnedTensor `json:"tensors"` // sorted by name
}

// PinnedTensor is one tensor of a [TensorManifest].
type PinnedTensor struct {
	Name   string  `json:"name"`
	Shard  string  `json:"shard"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	SHA256 string  `json:"sha256"`
}

// sha256Hex is a sha256 as hashes() writes it: lowercase hex.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseTensorManifest reads and checks a pinned manifest.
func ParseTensorManifest(data []byte) (*TensorManifest, error) {
	var m TensorManifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: tensor manifest: %w", ErrBadListing, err)
	}
	if m.Format != TensorManifestFormat {
		return nil, fmt.Errorf("%w: tensor manifest format %d (want %d)", ErrBadListing, m.Format, TensorManifestFormat)
	}
	if err := checkRepo(m.Repo); err != nil {
		return nil, err
	}
	if !commitID.MatchString(m.SHA) {
		return nil, fmt.Errorf("%w: tensor manifest commit %q", ErrBadListing, m.SHA)
	}
	if len(m.Tensors) == 0 || len(m.Tensors) > MaxFiles*64 {
		return nil, fmt.Errorf("%w: tensor manifest of %d tensors", ErrBadListing, len(m.Tensors))
	}
	for i, t := range m.Tensors {
		if err := checkName(t.Shard); err != nil {
			return nil, fmt.Errorf("%w: tensor manifest: %w", ErrBadListing, err)
		}
		if !sha256Hex.MatchString(t.SHA256) {
			return nil, fmt.Errorf("%w: tensor manifest: %s: sha256 %q", ErrBadListing, t.Name, t.SHA256)
		}
		if i > 0 && m.Tensors[i-1].Name >= t.Name {
			return nil, fmt.Errorf("%w: tensor manifest: names not sorted and unique at %q", ErrBadListing, t.Name)
		}
	}
	return &m, nil
}

// tensorSpan is one wanted tensor: where the shard holds it and where the
// raw file keeps it.
type tensorSpan struct {
	Name  string  `json:"name"`
	Shard string  `json:"shard"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	// Begin and End are offsets in the shard file; Raw in the raw file.
	Begin, End, Raw int64
}

// byteRange is a run of adjacent wanted tensors of one shard: one request.
type byteRange struct {
	Shard      string `json:"shard"`
	Begin, End int64  // in the shard file
	Raw        int64  // in the raw file
}

// tensorState is a tensor fetch's resume state: the plan it was made
// for and how many bytes of each range are on disk.
type tensorState struct {
	Repo   string      `json:"repo"`
	SHA    string      `json:"sha"`
	Filter string      `json:"filter"`
	Ranges []byteRange `json:"ranges"`
	Done   []int64     `json:"done"`
}

// tensorFetch is one fetch of a filter's tensors from a repository.
type tensorFetch struct {
	p        *puller // the options, client, backoff and progress of the pull
	endpoint string
	repo     string
	sha      string
	filter   TensorFilter
	staging  string

	spans  []tensorSpan // sorted by name
	ranges []byteRange
	done   []atomic.Int64
	raw    *os.File
	mu     sync.Mutex // guards saving the state
}

// resolveURL is where the Hub serves a file of the fetch's repository.
func (tf *tensorFetch) resolveURL(name string) string {
	return tf.endpoint + "/" + tf.repo + "/resolve/" + tf.sha + "/" + escapePath(name)
}

// escapePath escapes each element of a slash-separated name.
func escapePath(name string) string {
	elems := strings.Split(name, "/")
	for k, e := range elems {
		elems[k] = url.PathEscape(e)
	}
	return strings.Join(elems, "/")
}

// plan reads the index and the wanted shards' headers and lays the wanted
// tensors out in ranges.
func (tf *tensorFetch) plan(ctx context.Context) error {
	shardOf, err := tf.index(ctx)
	if err != nil {
		return err
	}
	byShard := map[string][]string{}
	for name, shard := range shardOf {
		if tf.filter.Match(name) {
			if err := checkName(shard); err != nil {
				return fmt.Errorf("%w: %s of %s: %w", ErrBadListing, indexName, tf.repo, err)
			}
			byShard[shard] = append(byShard[shard], name)
		}
	}
	if len(byShard) == 0 {
		return fmt.Errorf("%w: %s@%s has no tensors under %q", ErrNotFound, tf.repo, tf.sha, tf.filter.Prefixes)
	}
	var raw int64
	for _, shard := range slices.Sorted(maps.Keys(byShard)) {
		h, err := tf.header(ctx, shard)
		if err != nil {
			return err
		}
		infos := map[string]safetensors.Info{}
		for _, info := range h.Tensors {
			infos[info.Name] = info
		}
		var spans []tensorSpan
		for _, name := range byShard[shard] {
			info, ok := infos[name]
			if !ok {
				return fmt.Errorf("%w: %s names %s in %s, whose header lacks it", ErrBadListing, indexName, name, shard)
			}
			shape := make([]int64, len(info.Shape))
			for i, d := range info.Shape {
				shape[i] = int64(d)
			}
			spans = append(spans, tensorSpan{Name: name, Shard: shard, DType: string(info.DType), Shape: shape,
				Begin: h.DataOffset + info.Begin, End: h.DataOffset + info.End})
		}
		sort.Slice(spans, func(a, b int) bool { return spans[a].Begin < spans[b].Begin })
		for i := range spans {
			s := &spans[i]
			if n := len(tf.ranges); n > 0 && tf.ranges[n-1].Shard == shard && tf.ranges[n-1].End == s.Begin {
				tf.ranges[n-1].End = s.End // adjacent: one request
			} else {
				tf.ranges = append(tf.ranges, byteRange{Shard: shard, Begin: s.Begin, End: s.End, Raw: raw})
			}
			s.Raw = raw
			raw += s.End - s.Begin
		}
		tf.spans = append(tf.spans, spans...)
	}
	sort.Slice(tf.spans, func(a, b int) bool { return tf.spans[a].Name < tf.spans[b].Name })
	return nil
}

// checkPinned refuses a plan that differs from the pinned manifest in any
// tensor's name, shard, dtype or shape.
func (tf *tensorFetch) checkPinned(m *TensorManifest) error {
	if m.Repo != tf.repo || m.SHA != tf.sha || m.Filter != tf.filter.Name {
		return fmt.Errorf("%w: the pinned manifest is for %s@%s %q, not %s@%s %q", ErrBadListing, m.Repo, m.SHA, m.Filter, tf.repo, tf.sha, tf.filter.Name)
	}
	if len(m.Tensors) != len(tf.spans) {
		return fmt.Errorf("%w: %s@%s has %d tensors under %q, the pinned manifest %d", ErrBadListing, tf.repo, tf.sha, len(tf.spans), tf.filter.Prefixes, len(m.Tensors))
	}
	for i, s := range tf.spans {
		p := m.Tensors[i]
		if p.Name != s.Name || p.Shard != s.Shard || p.DType != s.DType || !slices.Equal(p.Shape, s.Shape) {
			return fmt.Errorf("%w: %s is %s %v in %s; the pinned manifest has %s %s %v in %s", ErrBadListing,
				s.Name, s.DType, s.Shape, s.Shard, p.Name, p.DType, p.Shape, p.Shard)
		}
	}
	return nil
}

// index reads which shard holds each tensor; a repository without an
// index keeps every tensor in singleShard.
func (tf *tensorFetch) index(ctx context.Context) (map[string]string, error) {
	body, err := retry(ctx, tf.p, indexName, func() ([]byte, error) { return tf.getSmall(ctx, indexName, maxIndexBytes) })
	if errors.Is(err, ErrNotFound) {
		return tf.singleShardIndex(ctx)
	}
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(body, &idx); err != nil {
		return nil, fmt.Errorf("%w: %s of %s: %w", ErrBadListing, indexName, tf.repo, err)
	}
	return idx.WeightMap, nil
}

// singleShardIndex names every tensor of singleShard.
func (tf *tensorFetch) singleShardIndex(ctx context.Context) (map[string]string, error) {
	h, err := tf.header(ctx, singleShard)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, info := range h.Tensors {
		m[info.Name] = singleShard
	}
	return m, nil
}

// getSmall fetches a whole small file.
func (tf *tensorFetch) getSmall(ctx context.Context, name string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tf.resolveURL(name), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	resp, err := tf.p.c.Do(req)
	if err != nil {
		return nil, netError(ctx, name, err)
	}
	defer resp.Body.Close()
	if err := statusError(resp, tf.repo+"/"+name); err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, netError(ctx, name, err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("%w: %s of %s is over %d bytes", ErrBadListing, name, tf.repo, limit)
	}
	return body, nil
}

// header reads a shard's header with two range requests: its length (and
// from the answer the file's size), then the JSON.
func (tf *tensorFetch) header(ctx context.Context, shard string) (*safetensors.Header, error) {
	var size int64
	prefix, err := retry(ctx, tf.p, shard, func() ([]byte, error) {
		b, total, err := tf.getRange(ctx, shard, 0, lenPrefix)
		size = total
		return b, err
	})
	if err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(prefix)
	if n > safetensors.MaxHeaderSize || lenPrefix+int64(n) > size {
		return nil, fmt.Errorf("%w: %s: header length %d in a file of %d bytes", ErrBadListing, shard, n, size)
	}
	js, err := retry(ctx, tf.p, shard, func() ([]byte, error) {
		b, _, err := tf.getRange(ctx, shard, lenPrefix, lenPrefix+int64(n))
		return b, err
	})
	if err != nil {
		return nil, err
	}
	h, err := safetensors.ParseHeader(append(prefix, js...), size)
	if err != nil {
		return nil, fmt.Errorf("%w: %s of %s: %w", ErrBadListing, shard, tf.repo, err)
	}
	return h, nil
}

// getRange fetches bytes [off, end) of a shard whole, and the shard's size
// from the answer's Content-Range.
func (tf *tensorFetch) getRange(ctx context.Context, shard string, off, end int64) ([]byte, int64, error) {
	var buf []byte
	_, total, err := tf.stream(ctx, shard, off, end, func(b []byte, _ int64) error {
		buf = append(buf, b...)
		return nil
	})
	return buf, total, err
}

// stream fetches bytes [off, end) of a shard and hands them to write with
// their offsets as they come; it returns how many it handed over and the
// shard's size. It insists on a 206 for exactly that range: a server that
// ignores Range would send the whole shard, gigabytes for kilobytes.
func (tf *tensorFetch) stream(ctx context.Context, shard string, off, end int64, write func([]byte, int64) error) (int64, int64, error) {
	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := tf.p.o.StallTimeout
	timer := time.AfterFunc(stall, func() { cancel(ErrStalled) })
	defer timer.Stop()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, tf.resolveURL(shard), nil)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrInput, err)
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, end-1))
	resp, err := tf.p.c.Do(req)
	if err != nil {
		return 0, 0, netError(reqCtx, shard, err)
	}
	defer resp.Body.Close()
	if err := statusError(resp, tf.repo+"/"+shard); err != nil {
		return 0, 0, err
	}
	total, err := partialRange(resp, shard, off, end)
	if err != nil {
		return 0, 0, err
	}
	buf := make([]byte, min(readBuffer, end-off))
	var n int64
	for off+n < end {
		m, rerr := resp.Body.Read(buf[:min(int64(len(buf)), end-off-n)])
		if m > 0 {
			timer.Reset(stall)
			if err := write(buf[:m], off+n); err != nil {
				return n, total, err
			}
			n += int64(m)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return n, total, netError(reqCtx, shard, rerr)
		}
	}
	if off+n < end {
		return n, total, &retryable{fmt.Errorf("hub: %s: the connection ended %d bytes short", shard, end-off-n)}
	}
	return n, total, nil
}

// ErrNoRanges reports a server that answers a range request with the
// whole file, or with other bytes than asked: a tensor fetch cannot use it.
var ErrNoRanges = errors.New("hub: the server does not honour range requests")

// partialRange checks a range answer: a 206 whose Content-Range is exactly
// [off, end) of a file whose size it gives, and a Content-Length, if any,
// of that many bytes. It returns the file's size.
func partialRange(resp *http.Response, shard string, off, end int64) (int64, error) {
	if resp.StatusCode != http.StatusPartialContent {
		return 0, fmt.Errorf("%w: %s: asked for bytes %d-%d, got %s with the whole file", ErrNoRanges, shard, off, end-1, resp.Status)
	}
	cr := resp.Header.Get("Content-Range")
	spec, ok := strings.CutPrefix(cr, "bytes ")
	rng, size, ok2 := strings.Cut(spec, "/")
	first, last, ok3 := strings.Cut(rng, "-")
	a, err1 := strconv.ParseInt(first, 10, 64)
	b, err2 := strconv.ParseInt(last, 10, 64)
	total, err3 := strconv.ParseInt(size, 10, 64)
	if !ok || !ok2 || !ok3 || err1 != nil || err2 != nil || err3 != nil || a != off || b != end-1 || total < end {
		return 0, fmt.Errorf("%w: %s: asked for bytes %d-%d, got Content-Range %q", ErrNoRanges, shard, off, end-1, cr)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != end-off {
		return 0, fmt.Errorf("%w: %s: asked for %d bytes, the answer is %d long", ErrNoRanges, shard, end-off, resp.ContentLength)
	}
	return total, nil
}

// retry runs f until it succeeds, fails for good or runs out of attempts,
// backing off between attempts as the main download does.
func retry[T any](ctx context.Context, p *puller, what string, f func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := f()
		if err == nil || !isRetryable(err) || ctx.Err() != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return v, err
		}
		if attempt > p.o.MaxRetries {
			return v, unreachable(fmt.Errorf("hub: %s: gave up after %d attempts: %w", what, attempt, err))
		}
		if err := p.retryAfter(ctx, Event{Phase: FetchingTensors, File: what}, err, attempt); err != nil {
			return v, err
		}
	}
}

// fetchRanges brings every range onto the raw file, resuming from the
// state, with o.Parallel connections.
func (tf *tensorFetch) fetchRanges(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	queue := make(chan int, len(tf.ranges))
	for i := range tf.ranges {
		queue <- i
	}
	close(queue)
	var wg sync.WaitGroup
	for range tf.p.o.Parallel {
		wg.Go(func() {
			for i := range queue {
				if ctx.Err() != nil {
					return
				}
				if err := tf.fetchRange(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		tick := time.NewTicker(progressInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				tf.saveState()
				tf.emitProgress()
			}
		}
	}()
	wg.Wait()
	cancel(nil)
	<-reported
	saveErr := tf.saveState()
	tf.emitProgress()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return saveErr
}

// fetchRange brings range i onto disk from where it stands. Attempts that
// moved data reset the count, as in the main download.
func (tf *tensorFetch) fetchRange(ctx context.Context, i int) error {
	r := tf.ranges[i]
	for attempt := 1; ; {
		off := r.Begin + tf.done[i].Load()
		if off >= r.End {
			return nil
		}
		n, _, err := tf.stream(ctx, r.Shard, off, r.End, func(b []byte, at int64) error {
			if _, err := tf.raw.WriteAt(b, r.Raw+at-r.Begin); err != nil {
				return fmt.Errorf("hub: writing %s: %w", rawName, err)
			}
			tf.done[i].Add(int64(len(b)))
			return nil
		})
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !isRetryable(err) {
			return err
		}
		if n > 0 {
			attempt = 1
		}
		if attempt > tf.p.o.MaxRetries {
			return unreachable(fmt.Errorf("hub: %s: gave up after %d attempts: %w", r.Shard, attempt, err))
		}
		if err := tf.p.retryAfter(ctx, tf.progressEvent(), err, attempt); err != nil {
			return err
		}
		attempt++
	}
}

func (tf *tensorFetch) progressEvent() Event {
	var done, total int64
	for i, r := range tf.ranges {
		done += tf.done[i].Load()
		total += r.End - r.Begin
	}
	return Event{Phase: FetchingTensors, File: tf.repo, Done: done, Total: total}
}

func (tf *tensorFetch) emitProgress() { tf.p.emit(tf.progressEvent()) }

// statePath is the resume state's path.
func (tf *tensorFetch) statePath() string { return filepath.Join(tf.staging, tensorStateName) }

// openRaw opens the raw file and takes the resume state if it was saved
// for the same plan and the raw file holds what it claims.
func (tf *tensorFetch) openRaw() error {
	if err := os.MkdirAll(tf.staging, 0o755); err != nil {
		return err
	}
	raw, err := os.OpenFile(filepath.Join(tf.staging, rawName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	tf.raw = raw
	tf.done = make([]atomic.Int64, len(tf.ranges))
	data, err := readSmall(tf.statePath())
	if err != nil {
		return nil
	}
	var st tensorState
	info, err := raw.Stat()
	if err != nil || json.Unmarshal(data, &st) != nil || st.Repo != tf.repo || st.SHA != tf.sha ||
		st.Filter != tf.filter.Name || !slices.Equal(st.Ranges, tf.ranges) || len(st.Done) != len(tf.ranges) {
		return nil
	}
	for i, d := range st.Done {
		r := tf.ranges[i]
		if d < 0 || d > r.End-r.Begin || r.Raw+d > info.Size() {
			d = 0 // the raw file was cut short of what the state says
		}
		tf.done[i].Store(d)
	}
	return nil
}

// saveState writes the resume state after syncing the raw file, so the
// state never claims bytes a crash could lose.
func (tf *tensorFetch) saveState() error {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	st := tensorState{Repo: tf.repo, SHA: tf.sha, Filter: tf.filter.Name, Ranges: tf.ranges, Done: make([]int64, len(tf.ranges))}
	for i := range tf.done {
		st.Done[i] = tf.done[i].Load()
	}
	if err := tf.raw.Sync(); err != nil {
		return err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return writeFileSync(tf.statePath(), data)
}

// hashes returns each span's sha256 (hex), read back from the raw file.
func (tf *tensorFetch) hashes() (map[string]string, error) {
	out := map[string]string{}
	for _, s := range tf.spans {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(tf.raw, s.Raw, s.End-s.Begin)); err != nil {
			return nil, fmt.Errorf("hub: reading %s back: %w", s.Name, err)
		}
		out[s.Name] = hex.EncodeToString(h.Sum(nil))
	}
	return out, nil
}

// verify checks every tensor against the pinned manifest. The ranges
// holding a tensor that differs are discarded, so the next pull fetches
// them anew.
func (tf *tensorFetch) verify(m *TensorManifest) error {
	sums, err := tf.hashes()
	if err != nil {
		return err
	}
	var bad []string
	for _, p := range m.Tensors {
		if sums[p.Name] == p.SHA256 {
			continue
		}
		bad = append(bad, p.Name)
		for i, r := range tf.ranges {
			for _, s := range tf.spans {
				if s.Name == p.Name && r.Shard == s.Shard && r.Begin <= s.Begin && s.End <= r.End {
					tf.done[i].Store(0)
				}
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	if err := tf.saveState(); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s of %s@%s (discarded; pulling again fetches them anew)", ErrChecksum, strings.Join(bad, ", "), tf.repo, tf.sha)
}

func (tf *tensorFetch) close() {
	if tf.raw != nil {
		tf.raw.Close()
	}
}

// fetch plans the fetch, fetches what is missing and, with a pinned
// manifest, verifies every tensor. Without one (making the manifest) it
// only fetches.
func (tf *tensorFetch) fetch(ctx context.Context, pinned *TensorManifest) error {
	if err := tf.plan(ctx); err != nil {
		return err
	}
	if pinned != nil {
		if err := tf.checkPinned(pinned); err != nil {
			return err
		}
	}
	if err := tf.openRaw(); err != nil {
		return err
	}
	if err := tf.checkSpace(); err != nil {
		return err
	}
	if err := tf.fetchRanges(ctx); err != nil {
		return err
	}
	if pinned == nil {
		return nil
	}
	return tf.verify(pinned)
}

// checkSpace refuses a fetch the disk cannot hold: the ranges still to
// come, and the converted file beside them (never larger than the
// original bytes), with DiskMargin to spare.
func (tf *tensorFetch) checkSpace() error {
	ev := tf.progressEvent()
	need := ev.Total - ev.Done + ev.Total
	free, err := tf.p.o.FreeSpace(tf.staging)
	if err != nil {
		return err
	}
	if free < need+DiskMargin {
		return fmt.Errorf("%w: the %s tensors of %s need %.2f GB more (and %.2f GB to spare); %.2f GB are free",
			ErrNoSpace, tf.filter.Name, tf.repo, float64(need)/1e9, float64(DiskMargin)/1e9, float64(free)/1e9)
	}
	return nil
}

// MakeTensorManifest fetches filter's tensors of opts.Repo at
// opts.Revision by range requests (into a staging folder under work,
// removed after) and returns their pinned manifest: what
// tools/tensormanifest writes once, from the real files, for a pull to
// check against. Endpoint, Token, Parallel and the retry options apply as
// to a pull.
func MakeTensorManifest(ctx context.Context, opts Options, filter TensorFilter, work string) (*TensorManifest, error) {
	if opts.Dir == "" {
		opts.Dir = filepath.Join(work, "manifest")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &puller{o: o, c: o.client()}
	l, err := p.fetchListing(ctx)
	if err != nil {
		return nil, err
	}
	tf := &tensorFetch{p: p, endpoint: o.Endpoint, repo: o.Repo, sha: l.SHA, filter: filter, staging: tensorStaging(o.Dir, filter)}
	defer os.RemoveAll(tf.staging)
	defer tf.close()
	if err := tf.fetch(ctx, nil); err != nil {
		return nil, err
	}
	sums, err := tf.hashes()
	if err != nil {
		return nil, err
	}
	m := &TensorManifest{Format: TensorManifestFormat, Repo: o.Repo, SHA: l.SHA, Filter: filter.Name}
	for _, s := range tf.spans {
		m.Tensors = append(m.Tensors, PinnedTensor{Name: s.Name, Shard: s.Shard, DType: s.DType, Shape: s.Shape, SHA256: sums[s.Name]})
	}
	return m, nil
}
