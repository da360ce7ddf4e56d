package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHub serves a fixture checkpoint the way the Hugging Face Hub does:
// the revision API with sizes, blob ids and LFS sha256, and resolve URLs
// that answer small files directly and redirect LFS files to a second
// server on another host (port), the CDN. Faults are injected per file.
type fakeHub struct {
	t        *testing.T
	repo     string
	sha      string
	files    map[string][]byte
	lfs      map[string]bool
	hub, cdn *httptest.Server

	mu       sync.Mutex
	served   map[string]int64 // body bytes written, per file
	resolves map[string]int   // resolve requests, per file
	auth     map[string]bool  // server ("hub" or "cdn") -> saw an Authorization header
	listings int

	// Faults, each consumed when it fires unless noted.
	cutAfter   map[string]int64 // drop the connection after this many bytes
	stallAfter map[string]int64 // send this many bytes, then nothing
	stallHold  time.Duration    // how long a stall lasts at most
	corrupt    map[string]bool  // always serve a flipped byte
	missing    map[string]bool  // always 404
	editList   func(*apiModel)  // rewrite the listing
}

const fakeSHA = "0123456789abcdef0123456789abcdef01234567"

// newFakeHub serves the fixture folder dir (and a nested small file) as
// owner/name at fakeSHA.
func newFakeHub(t *testing.T, dir string) *fakeHub {
	t.Helper()
	h := &fakeHub{
		t: t, repo: "petal-test/tiny", sha: fakeSHA,
		files: map[string][]byte{}, lfs: map[string]bool{},
		served: map[string]int64{}, resolves: map[string]int{}, auth: map[string]bool{},
		cutAfter: map[string]int64{}, stallAfter: map[string]int64{},
		corrupt: map[string]bool{}, missing: map[string]bool{}, stallHold: 10 * time.Second,
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		h.files[e.Name()] = data
		h.lfs[e.Name()] = !strings.HasSuffix(e.Name(), ".json")
	}
	h.files["docs/notes.txt"] = []byte("a file in a subfolder\n")
	h.hub = httptest.NewServer(h.routes("hub"))
	h.cdn = httptest.NewServer(h.routes("cdn"))
	t.Cleanup(func() {
		h.hub.CloseClientConnections()
		h.cdn.CloseClientConnections()
		h.hub.Close()
		h.cdn.Close()
	})
	return h
}

func (h *fakeHub) routes(server string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/models/{owner}/{name}/revision/{rev}", func(w http.ResponseWriter, r *http.Request) {
		h.note(server, r)
		h.mu.Lock()
		h.listings++
		h.mu.Unlock()
		if r.PathValue("owner")+"/"+r.PathValue("name") != h.repo || r.URL.Query().Get("blobs") != "true" {
			http.NotFound(w, r)
			return
		}
		m := h.listing()
		if h.editList != nil {
			h.editList(&m)
		}
		json.NewEncoder(w).Encode(m)
	})
	// /{owner}/{name}/resolve/{rev}/{file...}, parsed by hand: a mux
	// pattern for it would overlap the API's.
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		h.note(server, r)
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5)
		if len(parts) != 5 || parts[0]+"/"+parts[1] != h.repo || parts[2] != "resolve" {
			http.NotFound(w, r)
			return
		}
		rev, name := parts[3], parts[4]
		h.mu.Lock()
		h.resolves[name]++
		h.mu.Unlock()
		if _, ok := h.files[name]; !ok || h.missing[name] || rev != h.sha {
			http.NotFound(w, r)
			return
		}
		if h.lfs[name] {
			// As the Hub does: LFS content lives on another host.
			http.Redirect(w, r, h.cdn.URL+"/blobs/"+name, http.StatusFound)
			return
		}
		h.serve(w, r, name)
	})
	mux.HandleFunc("GET /blobs/{file...}", func(w http.ResponseWriter, r *http.Request) {
		h.note(server, r)
		h.serve(w, r, r.PathValue("file"))
	})
	return mux
}

func (h *fakeHub) note(server string, r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		h.mu.Lock()
		h.auth[server] = true
		h.mu.Unlock()
	}
}

// listing is the API answer for the files.
func (h *fakeHub) listing() apiModel {
	m := apiModel{ID: h.repo, SHA: h.sha}
	names := make([]string, 0, len(h.files))
	for n := range h.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		data := h.files[n]
		size := int64(len(data))
		s := struct {
			Name   string `json:"rfilename"`
			Size   *int64 `json:"size"`
			BlobID string `json:"blobId"`
			LFS    *struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"lfs"`
		}{Name: n, Size: &size}
		if h.lfs[n] {
			sum := sha256.Sum256(data)
			s.BlobID = strings.Repeat("ab", 20) // the pointer file's blob: not the content's
			s.LFS = &struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			}{hex.EncodeToString(sum[:]), size}
		} else {
			g := sha1.New()
			fmt.Fprintf(g, "blob %d\x00", len(data))
			g.Write(data)
			s.BlobID = hex.EncodeToString(g.Sum(nil))
		}
		m.Siblings = append(m.Siblings, s)
	}
	return m
}

// serve answers a GET of name with Range support and the injected faults.
func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request, name string) {
	data, ok := h.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	corrupt := h.corrupt[name]
	cut, hasCut := h.cutAfter[name]
	delete(h.cutAfter, name)
	stall, hasStall := h.stallAfter[name]
	delete(h.stallAfter, name)
	h.mu.Unlock()
	if corrupt {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0xff
	}
	start, end := int64(0), int64(len(data))
	status := http.StatusOK
	if rng := r.Header.Get("Range"); rng != "" {
		spec, _ := strings.CutPrefix(rng, "bytes=")
		a, b, _ := strings.Cut(spec, "-")
		s, err1 := strconv.ParseInt(a, 10, 64)
		e, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil || s > e || e >= end {
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start, end, status = s, e+1, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", s, e, len(data)))
	}
	if h.lfs[name] {
		sum := sha256.Sum256(h.files[name])
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
	}
	w.Header().Set("Content-Length", strconv.FormatInt(end-start, 10))
	w.WriteHeader(status)
	body := data[start:end]
	limit := int64(len(body))
	if hasCut {
		limit = min(limit, cut)
	}
	if hasStall {
		limit = min(limit, stall)
	}
	n, _ := w.Write(body[:limit])
	w.(http.Flusher).Flush()
	h.mu.Lock()
	h.served[name] += int64(n)
	h.mu.Unlock()
	if limit == int64(len(body)) {
		return
	}
	if hasStall {
		select {
		case <-r.Context().Done():
		case <-time.After(h.stallHold):
		}
	}
	panic(http.ErrAbortHandler) // drop the connection mid-body
}

func (h *fakeHub) total() int64 {
	var n int64
	for _, d := range h.files {
		n += int64(len(d))
	}
	return n
}

func (h *fakeHub) servedTotal() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for _, v := range h.served {
		n += v
	}
	return n
}

func (h *fakeHub) resolveCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.resolves {
		n += v
	}
	return n
}
