package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Limits on a listing, so a hostile or broken Hub cannot make a pull
// allocate, write or wait without bound.
const (
	MaxListingBytes = 4 << 20
	MaxFiles        = 4096
	MaxFileBytes    = 64 << 30
	MaxTotalBytes   = 1 << 40
	MaxNameBytes    = 1024
	maxElementBytes = 255
	maxDepth        = 8
)

// File is one file of a repository at a revision.
type File struct {
	Name string // slash-separated, relative to the repository root
	Size int64
	// SHA256 is the LFS object's hash (hex); empty for a file kept in git,
	// which BlobID (the git blob SHA-1, hex) identifies instead.
	SHA256 string
	BlobID string
}

// Listing is a repository's files at one commit.
type Listing struct {
	Repo  string
	SHA   string // the commit the revision resolved to
	Files []File
}

// Total is the size of every file.
func (l *Listing) Total() int64 {
	var n int64
	for _, f := range l.Files {
		n += f.Size
	}
	return n
}

// apiModel is the part of the Hub's /api/models/{repo}/revision/{rev}
// answer a pull reads.
type apiModel struct {
	ID       string `json:"id"`
	SHA      string `json:"sha"`
	Siblings []struct {
		Name   string `json:"rfilename"`
		Size   *int64 `json:"size"`
		BlobID string `json:"blobId"`
		LFS    *struct {
			SHA256 string `json:"sha256"`
			Size   int64  `json:"size"`
		} `json:"lfs"`
	} `json:"siblings"`
}

var (
	repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)
	revision = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	commitID = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// checkRepo accepts "owner/name" with plain characters.
func checkRepo(repo string) error {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || !repoPart.MatchString(owner) || !repoPart.MatchString(name) || strings.Contains(repo, "..") {
		return fmt.Errorf("%w: repository %q is not owner/name", ErrInput, repo)
	}
	return nil
}

func checkRevision(rev string) error {
	if !revision.MatchString(rev) || strings.Contains(rev, "..") {
		return fmt.Errorf("%w: revision %q", ErrInput, rev)
	}
	return nil
}

// fetchListing asks the Hub for repo's files at rev.
func fetchListing(ctx context.Context, c *http.Client, endpoint, repo, rev string) (*Listing, error) {
	u := endpoint + "/api/models/" + repo + "/revision/" + url.PathEscape(rev) + "?blobs=true"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, &retryable{fmt.Errorf("hub: listing %s@%s: %w", repo, rev, err)}
	}
	defer resp.Body.Close()
	if err := statusError(resp, "listing "+repo+"@"+rev); err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxListingBytes+1))
	if err != nil {
		return nil, &retryable{fmt.Errorf("hub: listing %s@%s: %w", repo, rev, err)}
	}
	if len(body) > MaxListingBytes {
		return nil, fmt.Errorf("%w: listing of %s is over %d bytes", ErrBadListing, repo, MaxListingBytes)
	}
	return parseListing(body, repo, rev)
}

// parseListing checks an API answer: a commit id, and names, sizes and
// hashes a pull can trust to build paths from.
func parseListing(body []byte, repo, rev string) (*Listing, error) {
	var m apiModel
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadListing, err)
	}
	if !commitID.MatchString(m.SHA) {
		return nil, fmt.Errorf("%w: commit id %q", ErrBadListing, m.SHA)
	}
	if commitID.MatchString(rev) && m.SHA != rev {
		return nil, fmt.Errorf("%w: asked for revision %s, the Hub answered %s", ErrBadListing, rev, m.SHA)
	}
	if len(m.Siblings) == 0 || len(m.Siblings) > MaxFiles {
		return nil, fmt.Errorf("%w: %d files (want 1..%d)", ErrBadListing, len(m.Siblings), MaxFiles)
	}
	l := &Listing{Repo: repo, SHA: m.SHA}
	seen := map[string]string{} // case-folded name to name
	var total int64
	for _, s := range m.Siblings {
		if err := checkName(s.Name); err != nil {
			return nil, err
		}
		folded := strings.ToLower(s.Name)
		if seen[folded] != "" {
			return nil, fmt.Errorf("%w: %q is listed twice (ignoring case)", ErrBadListing, s.Name)
		}
		seen[folded] = s.Name
		f := File{Name: s.Name, BlobID: strings.ToLower(s.BlobID)}
		switch {
		case s.LFS != nil:
			f.Size, f.SHA256 = s.LFS.Size, strings.ToLower(s.LFS.SHA256)
			if !isHex(f.SHA256, sha256.Size) {
				return nil, fmt.Errorf("%w: %s: LFS sha256 %q", ErrBadListing, s.Name, s.LFS.SHA256)
			}
		case s.Size != nil:
			f.Size = *s.Size
			if !isHex(f.BlobID, sha1.Size) {
				return nil, fmt.Errorf("%w: %s: no LFS hash and blob id %q", ErrBadListing, s.Name, s.BlobID)
			}
		default:
			return nil, fmt.Errorf("%w: %s has no size (the listing must be asked with blobs=true)", ErrBadListing, s.Name)
		}
		if f.Size < 0 || f.Size > MaxFileBytes {
			return nil, fmt.Errorf("%w: %s: size %d", ErrBadListing, s.Name, f.Size)
		}
		if total += f.Size; total > MaxTotalBytes {
			return nil, fmt.Errorf("%w: over %d bytes in all", ErrBadListing, int64(MaxTotalBytes))
		}
		l.Files = append(l.Files, f)
	}
	// A name that is also another's folder could be written as neither.
	for _, f := range l.Files {
		for dir := path.Dir(f.Name); dir != "."; dir = path.Dir(dir) {
			if file := seen[strings.ToLower(dir)]; file != "" {
				return nil, fmt.Errorf("%w: %q is listed as a file and as the folder of %q", ErrBadListing, file, f.Name)
			}
		}
	}
	return l, nil
}

func isHex(s string, bytes int) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == bytes
}

// checkName accepts a relative slash-separated path of plain elements:
// nothing absolute, no "." or ".." or empty element, no backslash, colon,
// control or bidi control character, nothing that starts like Petal's own
// staging names.
func checkName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w: file name %q: %s", ErrBadListing, name, why) }
	if name == "" || len(name) > MaxNameBytes {
		return bad("empty or too long")
	}
	if strings.ContainsAny(name, `\:`) || path.IsAbs(name) || filepath.IsAbs(name) {
		return bad("not a relative slash-separated path")
	}
	for _, r := range name {
		// Bidi controls (U+202E and kin) make a name read as another one.
		if unicode.IsControl(r) || r == unicode.ReplacementChar || unicode.Is(unicode.Bidi_Control, r) {
			return bad("control, bidi control or invalid character")
		}
	}
	elems := strings.Split(name, "/")
	if len(elems) > maxDepth {
		return bad("too deep")
	}
	for _, e := range elems {
		if e == "" || e == "." || e == ".." || len(e) > maxElementBytes || strings.TrimSpace(e) != e {
			return bad("empty, dot or padded element")
		}
	}
	if strings.HasPrefix(elems[0], petalPrefix) || strings.HasSuffix(name, partSuffix) {
		return bad("clashes with Petal's staging names")
	}
	if !filepath.IsLocal(filepath.FromSlash(name)) {
		return bad("not local")
	}
	return nil
}

// statusError turns a non-success answer into an error, marked retryable
// where waiting may help.
func statusError(resp *http.Response, what string) error {
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c == http.StatusNotFound:
		return fmt.Errorf("%w: %s: %s", ErrNotFound, what, resp.Status)
	case c == http.StatusUnauthorized || c == http.StatusForbidden:
		return fmt.Errorf("%w: %s: %s (set HF_TOKEN for a gated or private repository)", ErrAuth, what, resp.Status)
	case c == http.StatusTooManyRequests || c >= 500:
		return &retryable{fmt.Errorf("hub: %s: %w", what, &statusFailure{resp.Status})}
	default:
		return fmt.Errorf("hub: %s: %s", what, resp.Status)
	}
}

// retryable marks an error that another attempt may not meet.
type retryable struct{ err error }

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

func isRetryable(err error) bool {
	var r *retryable
	return errors.As(err, &r)
}
