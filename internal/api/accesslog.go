package api

import (
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"

	"petal/internal/service"
)

// The access log: one line per API request, written to Options.Logger
// once the request is answered (a stream once it ends):
//
//	access: 127.0.0.1:52114 claude-cli/2.1.332 "POST /v1/messages" 200 prompt=3385 cached=3072 disk=3072/0.041s completion=41 spec=30/38 2.315s
//
// the client's address and the product its User-Agent names first, the
// route, the status, the tokens of the prompt, of those read from the
// prefix cache (and, when its disk tier gave them, how many and in what
// time: "disk=0" when memory held them), of the reply, the MTP head's
// drafts that stood of those verified (only when it drafted), and how
// long it took. Never the body,
// the query or the headers' other values: what a client sends stays its
// own.

// accessWriter notes the status a handler answers with.
type accessWriter struct {
	http.ResponseWriter
	status int
}

func (w *accessWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *accessWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer
// (flushes and deadlines, which streams use).
func (w *accessWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// access is one request being logged.
type access struct {
	w     *accessWriter
	r     *http.Request
	usage *service.Usage
	start time.Time
}

// startAccess wraps w and r so that the request's status and token counts
// can be logged once it is answered; nil when the access log is off.
func (s *Server) startAccess(w http.ResponseWriter, r *http.Request) (*access, http.ResponseWriter, *http.Request) {
	if s.opts.NoAccessLog {
		return nil, w, r
	}
	ctx, usage := service.WithUsage(r.Context())
	a := &access{w: &accessWriter{ResponseWriter: w}, r: r.WithContext(ctx), usage: usage, start: time.Now()}
	return a, a.w, a.r
}

// log writes the request's line.
func (a *access) log(logger *log.Logger) {
	if a == nil {
		return
	}
	status := a.w.status
	if status == 0 {
		status = http.StatusOK // a handler that wrote nothing
	}
	prompt, cached, completion := a.usage.Counts()
	disk := "disk=0"
	if n, load := a.usage.Disk(); n > 0 {
		disk = fmt.Sprintf("disk=%d/%.3fs", n, load.Seconds())
	}
	spec := ""
	if drafted, accepted := a.usage.Speculation(); drafted > 0 {
		spec = fmt.Sprintf(" spec=%d/%d", accepted, drafted)
	}
	line := fmt.Sprintf("access: %s %s \"%s %s\" %d prompt=%d cached=%d %s completion=%d%s %.3fs",
		a.r.RemoteAddr, userAgentProduct(a.r.UserAgent()), a.r.Method, a.r.URL.EscapedPath(), status,
		prompt, cached, disk, completion, spec, time.Since(a.start).Seconds())
	if logger.Flags()&(log.Ldate|log.Ltime) == 0 {
		line = time.Now().UTC().Format(time.RFC3339) + " " + line
	}
	logger.Print(line)
}

// userAgentProduct is the first product of a User-Agent ("claude-cli/2.1.332"
// of "claude-cli/2.1.332 (external, cli)"), "-" for none, bounded and with
// any byte that is not printable ASCII (a client's attempt to forge a log
// line) replaced.
func userAgentProduct(ua string) string {
	product, _, _ := strings.Cut(strings.TrimSpace(ua), " ")
	if product == "" {
		return "-"
	}
	product = product[:min(len(product), MaxClientName)]
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' {
			return '?'
		}
		return r
	}, product)
}
