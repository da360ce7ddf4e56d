// Package hubtest is a fake of the Hugging Face Hub over real HTTP, for
// tests of downloads: it serves a folder (a fixture checkpoint) the way
// the Hub does, and injects the faults downloads meet.
//
// # What it serves
//
// GET /api/models/{owner}/{name}/revision/{rev}?blobs=true answers the
// file list with sizes, git blob ids and, for LFS files, sha256. GET
// /{owner}/{name}/resolve/{rev}/{file} answers small files itself and
// redirects LFS files (everything but *.json) to a second server on
// another port, the CDN, as the Hub sends them to another host. Both honour
// single byte ranges and send an ETag for LFS content.
//
// # Faults
//
// Per file: a connection cut after n bytes, a stall after n bytes, a
// flipped byte, a 404, Range headers ignored (the whole file with a 200);
// and any rewrite of the file list (hostile names,
// sizes, another commit). Counters say what was served, so a test can
// assert that a resumed download fetched nothing twice.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SHA is the commit the fake serves.
const SHA = "0123456789abcdef0123456789abcdef01234567"

// DefaultStallHold is how long a stall lasts unless the client hangs up.
const DefaultStallHold = 10 * time.Second

// Listing is the Hub API's answer, as the fake sends it.
type Listing struct {
	ID       string    `json:"id"`
	SHA      string    `json:"sha"`
	Siblings []Sibling `json:"siblings"`
}

// Sibling is one file in a Listing.
type Sibling struct {
	Name   string `json:"rfilename"`
	Size   *int64 `json:"size"`
	BlobID string `json:"blobId"`
	LFS    *LFS   `json:"lfs,omitempty"`
}

// LFS is the LFS part of a Sibling.
type LFS struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Server is the fake Hub and its CDN.
type Server struct {
	Repo  string
	Files map[string][]byte // by slash-separated name; do not change once serving
	LFS   map[string]bool
	// StallHold bounds a stall; set it before serving.
	StallHold time.Duration

	hub, cdn *httptest.Server

	mu         sync.Mutex
	served     map[string]int64
	resolves   map[string]int
	token      map[string]bool // "hub" or "cdn"
	listings   int
	cutAfter   map[string]int64
	stallAfter map[string]int64
	// stalling counts stalls that fired whose bytes are not counted yet.
	stalling int
	sums     map[string]string
	corrupt  map[string]bool
	missing  map[string]bool
	noRange  map[string]bool
	edit     func(*Listing)
	// stallWaiters are closed once Stalled holds.
	stallWaiters []chan struct{}
}

// New serves the files of dir (and one nested small file,
// "docs/notes.txt") as repo "petal-test/tiny" at [SHA], until the test
// ends.
func New(t testing.TB, dir string) *Server {
	t.Helper()
	s := &Server{
		Repo: "petal-test/tiny", Files: map[string][]byte{}, LFS: map[string]bool{}, StallHold: DefaultStallHold,
		served: map[string]int64{}, resolves: map[string]int{}, token: map[string]bool{}, sums: map[string]string{},
		cutAfter: map[string]int64{}, stallAfter: map[string]int64{}, corrupt: map[string]bool{}, missing: map[string]bool{},
		noRange: map[string]bool{},
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
		s.Files[e.Name()] = data
		s.LFS[e.Name()] = !strings.HasSuffix(e.Name(), ".json")
	}
	s.Files["docs/notes.txt"] = []byte("a file in a subfolder\n")
	s.hub = httptest.NewServer(s.routes("hub"))
	s.cdn = httptest.NewServer(s.routes("cdn"))
	t.Cleanup(func() {
		s.hub.CloseClientConnections()
		s.cdn.CloseClientConnections()
		s.hub.Close()
		s.cdn.Close()
	})
	return s
}

// URL is the endpoint to pull from.
func (s *Server) URL() string { return s.hub.URL }

// CutAfter makes the next answer for name that is longer than n bytes
// drop its connection after n bytes of body.
func (s *Server) CutAfter(name string, n int64) { s.set(func() { s.cutAfter[name] = n }) }

// StallAfter makes the next answer for name that is longer than n bytes
// send n bytes of body, then nothing until the client hangs up or
// StallHold passes.
func (s *Server) StallAfter(name string, n int64) { s.set(func() { s.stallAfter[name] = n }) }

// Corrupt makes every answer for name carry one flipped byte, or stops it.
func (s *Server) Corrupt(name string, on bool) { s.set(func() { s.corrupt[name] = on }) }

// Missing makes every request for name a 404.
func (s *Server) Missing(name string) { s.set(func() { s.missing[name] = true }) }

// IgnoreRange makes every answer for name the whole file with a 200,
// whatever Range asked, as some servers and proxies do.
func (s *Server) IgnoreRange(name string) { s.set(func() { s.noRange[name] = true }) }

// EditListing rewrites every file list before it is sent.
func (s *Server) EditListing(f func(*Listing)) { s.set(func() { s.edit = f }) }

func (s *Server) set(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	if s.stalledLocked() {
		for _, c := range s.stallWaiters {
			close(c)
		}
		s.stallWaiters = nil
	}
}

// Stalled reports whether every stall set has fired and sent, and
// Served counts, the bytes it lets through.
func (s *Server) Stalled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalledLocked()
}

func (s *Server) stalledLocked() bool { return len(s.stallAfter) == 0 && s.stalling == 0 }

// WhenStalled returns a channel closed once Stalled holds.
func (s *Server) WhenStalled() <-chan struct{} {
	c := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stalledLocked() {
		close(c)
	} else {
		s.stallWaiters = append(s.stallWaiters, c)
	}
	return c
}

// Served is how many bytes of file content were sent in all.
func (s *Server) Served() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, v := range s.served {
		n += v
	}
	return n
}

// Total is the size of every file.
func (s *Server) Total() int64 {
	var n int64
	for _, d := range s.Files {
		n += int64(len(d))
	}
	return n
}

// Resolves counts the resolve requests per file.
func (s *Server) Resolves() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.resolves)
}

// Listings counts the file-list requests.
func (s *Server) Listings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listings
}

// SawToken reports whether the hub or the CDN got an Authorization header.
func (s *Server) SawToken() (hub, cdn bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token["hub"], s.token["cdn"]
}

func (s *Server) routes(server string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/models/{owner}/{name}/revision/{rev}", func(w http.ResponseWriter, r *http.Request) {
		s.note(server, r)
		s.mu.Lock()
		s.listings++
		edit := s.edit
		s.mu.Unlock()
		if r.PathValue("owner")+"/"+r.PathValue("name") != s.Repo || r.URL.Query().Get("blobs") != "true" {
			http.NotFound(w, r)
			return
		}
		l := s.listing()
		if edit != nil {
			edit(&l)
		}
		json.NewEncoder(w).Encode(l)
	})
	mux.HandleFunc("GET /blobs/{file...}", func(w http.ResponseWriter, r *http.Request) {
		s.note(server, r)
		s.serve(w, r, r.PathValue("file"))
	})
	// /{owner}/{name}/resolve/{rev}/{file...}, parsed by hand: a mux
	// pattern for it would overlap the API's.
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		s.note(server, r)
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5)
		if len(parts) != 5 || parts[0]+"/"+parts[1] != s.Repo || parts[2] != "resolve" {
			http.NotFound(w, r)
			return
		}
		rev, name := parts[3], parts[4]
		s.mu.Lock()
		s.resolves[name]++
		missing := s.missing[name]
		s.mu.Unlock()
		if _, ok := s.Files[name]; !ok || missing || rev != SHA {
			http.NotFound(w, r)
			return
		}
		if s.LFS[name] {
			http.Redirect(w, r, s.cdn.URL+"/blobs/"+name, http.StatusFound)
			return
		}
		s.serve(w, r, name)
	})
	return mux
}

func (s *Server) note(server string, r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		s.set(func() { s.token[server] = true })
	}
}

// listing is the API answer for the files, sorted by name.
func (s *Server) listing() Listing {
	l := Listing{ID: s.Repo, SHA: SHA}
	for _, n := range slices.Sorted(maps.Keys(s.Files)) {
		data := s.Files[n]
		size := int64(len(data))
		sib := Sibling{Name: n, Size: &size}
		if s.LFS[n] {
			sib.BlobID = strings.Repeat("ab", 20) // the pointer file's blob, not the content's
			sib.LFS = &LFS{SHA256: s.sha256(n), Size: size}
		} else {
			g := sha1.New()
			fmt.Fprintf(g, "blob %d\x00", len(data))
			g.Write(data)
			sib.BlobID = hex.EncodeToString(g.Sum(nil))
		}
		l.Siblings = append(l.Siblings, sib)
	}
	return l
}

// sha256 is the hash of a file's content, hashed once: a fake serving
// big files would otherwise spend its time hashing them per request.
func (s *Server) sha256(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sum, ok := s.sums[name]; ok {
		return sum
	}
	sum := sha256.Sum256(s.Files[name])
	s.sums[name] = hex.EncodeToString(sum[:])
	return s.sums[name]
}

// serve answers a GET of name with Range support and the faults set.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, name string) {
	data, ok := s.Files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	corrupt, noRange := s.corrupt[name], s.noRange[name]
	s.mu.Unlock()
	if s.LFS[name] {
		w.Header().Set("ETag", `"`+s.sha256(name)+`"`)
	}
	if corrupt {
		data = slices.Clone(data)
		data[len(data)/2] ^= 0xff
	}
	start, end := int64(0), int64(len(data))
	status := http.StatusOK
	if rng := r.Header.Get("Range"); rng != "" && !noRange {
		spec, _ := strings.CutPrefix(rng, "bytes=")
		a, b, _ := strings.Cut(spec, "-")
		first, err1 := strconv.ParseInt(a, 10, 64)
		last, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil || first > last || last >= end {
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start, end, status = first, last+1, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", first, last, len(data)))
	}
	w.Header().Set("Content-Length", strconv.FormatInt(end-start, 10))
	w.WriteHeader(status)
	body := data[start:end]
	limit := int64(len(body))
	// A fault fires, and is used up, on the first answer it falls within.
	s.mu.Lock()
	cut, hasCut := s.cutAfter[name]
	hasCut = hasCut && cut < limit
	if hasCut {
		delete(s.cutAfter, name)
		limit = cut
	}
	stall, hasStall := s.stallAfter[name]
	hasStall = hasStall && stall < limit
	if hasStall {
		delete(s.stallAfter, name)
		s.stalling++
		limit = stall
	}
	s.mu.Unlock()
	n, _ := w.Write(body[:limit])
	w.(http.Flusher).Flush()
	s.set(func() {
		s.served[name] += int64(n)
		if hasStall {
			s.stalling--
		}
	})
	if limit == int64(len(body)) {
		return
	}
	if hasStall {
		select {
		case <-r.Context().Done():
		case <-time.After(s.StallHold):
		}
	}
	panic(http.ErrAbortHandler) // drop the connection mid-body
}

// HFCache writes the served files into a new Hugging Face hub cache the
// way huggingface_hub lays one out: each file's content in
// models--OWNER--NAME/blobs, named by its sha256 for an LFS file and by
// its git blob id otherwise, and snapshots/[SHA]/NAME a relative link to
// it. It returns the cache folder and each file's blob.
func (s *Server) HFCache(t testing.TB) (cache string, blobs map[string]string) {
	t.Helper()
	cache = t.TempDir()
	repoDir := filepath.Join(cache, "models--"+strings.ReplaceAll(s.Repo, "/", "--"))
	snap := filepath.Join(repoDir, "snapshots", SHA)
	blobs = map[string]string{}
	l := s.listing()
	for _, sib := range l.Siblings {
		id := sib.BlobID
		if sib.LFS != nil {
			id = sib.LFS.SHA256
		}
		blob := filepath.Join(repoDir, "blobs", id)
		link := filepath.Join(snap, filepath.FromSlash(sib.Name))
		for _, dir := range []string{filepath.Dir(blob), filepath.Dir(link)} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(blob, s.Files[sib.Name], 0o644); err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(filepath.Dir(link), blob)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(rel, link); err != nil {
			t.Fatal(err)
		}
		blobs[sib.Name] = blob
	}
	if err := os.MkdirAll(filepath.Join(repoDir, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repoDir, "refs", "main"), []byte(SHA), 0o644); err != nil {
		t.Fatal(err)
	}
	return cache, blobs
}
