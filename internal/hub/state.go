package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Names Petal gives its own files; listed names may not start with the
// prefix or end with the suffix.
const (
	petalPrefix  = ".petal-"
	partSuffix   = ".petal-part"
	stateName    = petalPrefix + "state.json"
	manifestName = petalPrefix + "manifest.json"
	// headsDir holds, in a staging folder, the original header regions of
	// the shards stored realigned.
	headsDir = petalPrefix + "heads"
	// maxStateBytes bounds the state and manifest files read back.
	maxStateBytes = 16 << 20
)

// state is what a pull needs to resume: per file, how many bytes of each
// chunk are on disk, or that the file is verified under its final name.
type state struct {
	Repo       string                `json:"repo"`
	SHA        string                `json:"sha"`
	ChunkBytes int64                 `json:"chunk_bytes"`
	Files      map[string]*fileState `json:"files"`
}

type fileState struct {
	Size     int64   `json:"size"`
	Verified bool    `json:"verified,omitempty"`
	Chunks   []int64 `json:"chunks,omitempty"`
	// Stored is the size of a verified shard stored realigned (its
	// original header region is in the heads folder); 0 for a file stored
	// as the Hub serves it.
	Stored int64 `json:"stored,omitempty"`
}

// manifest records what a finished model folder holds: the Hub's files
// with their sizes and hashes, and how the shards stored realigned differ
// from them.
type manifest struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	SHA      string `json:"sha"`
	Files    []File `json:"files"`
	// Realigned lists, by name, the files not stored as the Hub serves
	// them.
	Realigned map[string]realignedFile `json:"realigned,omitempty"`
	// Source is the folder an import took the files from.
	Source string `json:"source,omitempty"`
	// Derived lists, by name, the files among Files that Petal made from
	// tensors of another repository (the MTP head), and where from.
	Derived map[string]derivedFile `json:"derived,omitempty"`
}

// realignedFile is what Verify needs to check a shard stored realigned
// against the Hub's hash of the original.
type realignedFile struct {
	// Size and HeaderSHA256 are of the stored file and its header region.
	Size         int64  `json:"size"`
	HeaderSHA256 string `json:"header_sha256"`
	// OriginalHeader is the original's header region (length and JSON).
	OriginalHeader []byte `json:"original_header"`
}

// stagingPaths are the staging folder and lock file of a model folder.
func stagingPaths(dir string) (staging, lock string) {
	parent, base := filepath.Split(dir)
	return filepath.Join(parent, petalPrefix+base+".staging"), filepath.Join(parent, petalPrefix+base+".lock")
}

// loadState reads the staging folder's state; a missing, unreadable or
// foreign one gives nil.
func loadState(staging string, l *Listing) *state {
	data, err := readSmall(filepath.Join(staging, stateName))
	if err != nil {
		return nil
	}
	var st state
	if json.Unmarshal(data, &st) != nil || st.Repo != l.Repo || st.SHA != l.SHA || st.ChunkBytes < MinChunkBytes || st.Files == nil {
		return nil
	}
	for _, f := range l.Files {
		fs := st.Files[f.Name]
		if fs == nil {
			continue
		}
		if fs.Size != f.Size || (!fs.Verified && int64(len(fs.Chunks)) != chunkCount(f.Size, st.ChunkBytes)) {
			delete(st.Files, f.Name)
			continue
		}
		for i, n := range fs.Chunks {
			if n < 0 || n > chunkLen(f.Size, st.ChunkBytes, i) {
				delete(st.Files, f.Name)
				break
			}
		}
	}
	return &st
}

func chunkCount(size, chunk int64) int64 { return max(1, (size+chunk-1)/chunk) }

// chunkLen is the length of chunk i of a file.
func chunkLen(size, chunk int64, i int) int64 {
	start := int64(i) * chunk
	return min(size, start+chunk) - start
}

// writeFileSync writes data to path through a temporary file that is
// synced and renamed, so path holds the old or the new contents.
func writeFileSync(path string, data []byte) error {
	tmp := path + partSuffix
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if e := f.Sync(); err == nil {
		err = e
	}
	if e := f.Close(); err == nil {
		err = e
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStateBytes+1))
	if err == nil && len(data) > maxStateBytes {
		err = fmt.Errorf("hub: %s is over %d bytes", path, maxStateBytes)
	}
	return data, err
}

// readManifest reads the manifest of a finished model folder.
func readManifest(dir string) (*manifest, error) {
	data, err := readSmall(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("hub: %s: %w", filepath.Join(dir, manifestName), err)
	}
	return &m, nil
}

// hasher is the hash a file is checked with: sha256 for an LFS file,
// the git blob id (SHA-1 of "blob <size>\x00" and the contents) for a file
// known by it; sha256 for a file not known by either.
func hasher(f File) (hash.Hash, string) {
	if f.SHA256 != "" || f.BlobID == "" {
		return sha256.New(), f.SHA256
	}
	h := sha1.New()
	h.Write([]byte("blob " + strconv.FormatInt(f.Size, 10) + "\x00"))
	return h, f.BlobID
}

// verify reports whether r holds exactly f's contents.
func verify(r io.Reader, f File) (bool, error) {
	h, want := hasher(f)
	n, err := io.Copy(h, r)
	if err != nil {
		return false, err
	}
	return n == f.Size && hex.EncodeToString(h.Sum(nil)) == want, nil
}
