package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// readBuffer is how much of a body is read between writes.
const readBuffer = 256 << 10

// fetchChunk brings chunk i of j onto disk, resuming where it stands and
// retrying with backoff.
func (p *puller) fetchChunk(ctx context.Context, j *job, i int) error {
	start := int64(i) * p.st.ChunkBytes
	return p.fetchRange(ctx, j, i, start+chunkLen(j.f.Size, p.st.ChunkBytes, i))
}

// fetchRange brings chunk i of j onto disk up to file offset end. Attempts
// that moved data reset the count, so a long download survives any number
// of brief outages.
func (p *puller) fetchRange(ctx context.Context, j *job, i int, end int64) error {
	start := int64(i) * p.st.ChunkBytes
	for attempt := 1; ; {
		off := start + j.progress[i].Load()
		if off >= end {
			return nil
		}
		n, err := p.get(ctx, j, i, off, end)
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
		if attempt > p.o.MaxRetries {
			return unreachable(fmt.Errorf("hub: %s: gave up after %d attempts: %w", j.f.Name, attempt, err))
		}
		if err := p.retryAfter(ctx, Event{Phase: Downloading, File: j.f.Name, Done: p.doneLocked(), Total: p.total}, err, attempt); err != nil {
			return err
		}
		attempt++
	}
}

// fileURL is where the Hub serves a file at the listing's commit.
func (p *puller) fileURL(name string) string {
	return p.o.Endpoint + "/" + p.o.Repo + "/resolve/" + p.listing.SHA + "/" + escapePath(name)
}

// get fetches bytes [off, end) of j's file into its part file and returns
// how many it wrote. A connection that delivers nothing for StallTimeout
// is dropped.
func (p *puller) get(ctx context.Context, j *job, i int, off, end int64) (int64, error) {
	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := p.o.StallTimeout
	timer := time.AfterFunc(stall, func() { cancel(ErrStalled) })
	defer timer.Stop()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, p.fileURL(j.f.Name), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, end-1))
	resp, err := p.c.Do(req)
	if err != nil {
		return 0, netError(reqCtx, j.f.Name, err)
	}
	defer resp.Body.Close()
	if err := statusError(resp, j.f.Name); err != nil {
		return 0, err
	}
	if err := checkRange(resp, j.f, off, end); err != nil {
		return 0, err
	}
	buf := make([]byte, min(readBuffer, end-off))
	var n int64
	for off+n < end {
		m, rerr := resp.Body.Read(buf[:min(int64(len(buf)), end-off-n)])
		if m > 0 {
			timer.Reset(stall)
			if hook := p.o.beforeWrite; hook != nil {
				if err := hook(m); err != nil {
					return n, fmt.Errorf("hub: writing %s: %w", j.f.Name, err)
				}
			}
			if err := j.write(buf[:m], off+n); err != nil {
				return n, fmt.Errorf("hub: writing %s: %w", j.f.Name, err)
			}
			n += int64(m)
			j.progress[i].Add(int64(m))
			p.fetched.Add(int64(m))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return n, netError(reqCtx, j.f.Name, rerr)
		}
	}
	if off+n < end {
		return n, &retryable{fmt.Errorf("hub: %s: the connection ended %d bytes short", j.f.Name, end-off-n)}
	}
	return n, nil
}

// netError classifies a transport error: a stall or a network failure may
// pass; the caller's own cancellation may not.
func netError(reqCtx context.Context, name string, err error) error {
	cause := context.Cause(reqCtx)
	if errors.Is(cause, ErrStalled) {
		return &retryable{fmt.Errorf("hub: %s: %w", name, ErrStalled)}
	}
	if cause != nil {
		return cause
	}
	return &retryable{fmt.Errorf("hub: %s: %w", name, err)}
}

// checkRange accepts a 206 for exactly the bytes asked, or a 200 when the
// whole file was asked. ETags are not compared: CDNs name content their
// own way (Xet hashes, S3 digests), and every file is hashed anyway.
func checkRange(resp *http.Response, f File, off, end int64) error {
	switch resp.StatusCode {
	case http.StatusPartialContent:
		spec, ok := strings.CutPrefix(resp.Header.Get("Content-Range"), "bytes ")
		rng, size, ok2 := strings.Cut(spec, "/")
		first, last, ok3 := strings.Cut(rng, "-")
		a, err1 := strconv.ParseInt(first, 10, 64)
		b, err2 := strconv.ParseInt(last, 10, 64)
		if !ok || !ok2 || !ok3 || err1 != nil || err2 != nil || a != off || b >= end || b < a {
			return &retryable{fmt.Errorf("hub: %s: asked for bytes %d-%d, got %q", f.Name, off, end-1, resp.Header.Get("Content-Range"))}
		}
		if size != "*" && size != strconv.FormatInt(f.Size, 10) {
			return fmt.Errorf("%w: %s: the server's size %s is not the listing's %d", ErrChecksum, f.Name, size, f.Size)
		}
		return nil
	case http.StatusOK:
		if off == 0 && end == f.Size {
			return nil
		}
		return fmt.Errorf("hub: %s: the server ignores range requests", f.Name)
	}
	return fmt.Errorf("hub: %s: unexpected %s", f.Name, resp.Status)
}
