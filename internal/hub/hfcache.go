package hub

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// snapshotDir is where the Hugging Face cache keeps repo at commit sha.
func snapshotDir(cache, repo, sha string) string {
	return filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"), "snapshots", sha)
}

// importCache takes every file the Hugging Face cache holds at the
// listing's commit, hard-linked (copied across file systems), each hashed
// like a download; a shard that is stored realigned is rewritten in one
// pass that hashes what it reads. A file that does not match is left to
// the download.
func (p *puller) importCache(ctx context.Context) error {
	if p.o.NoHFCache || p.o.HFCache == "" {
		return nil
	}
	snap := snapshotDir(p.o.HFCache, p.listing.Repo, p.listing.SHA)
	if _, err := os.Stat(snap); err != nil {
		return nil
	}
	for _, f := range p.listing.Files {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if fs := p.st.Files[f.Name]; fs != nil && fs.Verified {
			continue
		}
		src, err := filepath.EvalSymlinks(filepath.Join(snap, filepath.FromSlash(f.Name)))
		if err != nil {
			continue
		}
		if info, err := os.Stat(src); err != nil || !info.Mode().IsRegular() || info.Size() != f.Size {
			continue
		}
		p.emit(Event{Phase: Importing, File: f.Name, Done: p.doneBytes(), Total: p.total})
		ok, stored, err := p.importFile(src, f)
		if err != nil {
			return err
		}
		if ok {
			p.st.Files[f.Name] = &fileState{Size: f.Size, Verified: true, Stored: stored}
			if err := p.saveState(); err != nil {
				return err
			}
		}
	}
	return nil
}

// importFile stores src as f (see storeFile), checks its hash against
// f's and renames it into place; false when the content is not f's. It
// returns the stored size of a realigned shard (0 for a file kept as it
// is), whose original header region goes to the heads folder.
func (p *puller) importFile(src string, f File) (bool, int64, error) {
	tmp := filepath.FromSlash(f.Name) + partSuffix
	sum, lay, err := p.storeFile(src, f)
	if _, want := hasher(f); err != nil || sum != want {
		p.root.Remove(tmp)
		if errors.Is(err, errNotShard) {
			err = nil // leave it to the download, which says what is wrong
		}
		return false, 0, err
	}
	return true, lay.storedSize(), p.keep(f.Name, lay)
}

// errNotShard marks a .safetensors file whose header does not parse.
var errNotShard = errors.New("hub: not a safetensors shard")

// storeFile puts src at f's temporary name in the staging folder: a shard
// that needs realigning rewritten in one pass that hashes the original as
// it is read, anything else hard-linked (copied across file systems) and
// hashed. It returns the hash of the original's bytes (of f's kind) and,
// for a realigned shard, its layout.
func (p *puller) storeFile(src string, f File) (string, *layout, error) {
	tmp := filepath.FromSlash(f.Name) + partSuffix
	if err := p.mkdirFor(f.Name); err != nil {
		return "", nil, err
	}
	p.root.Remove(tmp)
	if realigns(f) {
		lay, err := layoutOf(src, f.Size)
		if err != nil {
			return "", nil, fmt.Errorf("%w: %s: %w", errNotShard, src, err)
		}
		if !lay.verbatim {
			sum, err := p.writeRealigned(src, tmp, f, lay)
			return sum, lay, err
		}
	}
	if err := os.Link(src, filepath.Join(p.staging, tmp)); err != nil {
		if err := p.copyFile(src, tmp, f.Size); err != nil {
			return "", nil, err
		}
	}
	got, err := p.root.Open(tmp)
	if err != nil {
		return "", nil, err
	}
	defer got.Close()
	h, _ := hasher(f)
	n, err := io.Copy(h, got)
	if err == nil && n != f.Size {
		err = fmt.Errorf("hub: %s changed while it was imported", src)
	}
	return hex.EncodeToString(h.Sum(nil)), nil, err
}

// keep gives a stored file its final name; a realigned shard's original
// header region goes to the heads folder for the manifest.
func (p *puller) keep(name string, lay *layout) error {
	if lay != nil {
		hp := headPath(name)
		if err := p.root.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			return err
		}
		if err := p.root.WriteFile(hp, lay.origHead, 0o644); err != nil {
			return err
		}
	}
	n := filepath.FromSlash(name)
	return p.root.Rename(n+partSuffix, n)
}

// layoutOf plans the stored form of the shard at path.
func layoutOf(path string, size int64) (*layout, error) {
	in, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	head, err := readHeadRegion(in, size)
	if err != nil {
		return nil, err
	}
	return planLayout(head, size)
}

// writeRealigned writes the stored form of the shard at src to tmp in
// the staging folder and returns the hash of the original's bytes.
func (p *puller) writeRealigned(src, tmp string, f File, lay *layout) (string, error) {
	if err := p.haveRoom(src, lay.size); err != nil {
		return "", err
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	if _, err := in.Seek(lay.origData, io.SeekStart); err != nil {
		return "", err
	}
	out, err := p.root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", err
	}
	h, _ := hasher(f)
	n, err := writeRealigned(out, in, lay, h)
	if e := out.Sync(); err == nil {
		err = e
	}
	if e := out.Close(); err == nil {
		err = e
	}
	if err == nil && n != f.Size {
		err = fmt.Errorf("hub: %s changed while it was imported", src)
	}
	return hex.EncodeToString(h.Sum(nil)), err
}

// haveRoom checks that the disk has room for a copy of size bytes of src.
func (p *puller) haveRoom(src string, size int64) error {
	free, err := p.o.FreeSpace(p.staging)
	if err != nil {
		return err
	}
	if free < size+DiskMargin {
		return fmt.Errorf("%w: copying %s needs %.2f GB; %.2f GB are free",
			ErrNoSpace, src, float64(size+DiskMargin)/1e9, float64(free)/1e9)
	}
	return nil
}

// copyFile copies src to name in the staging folder, if the disk has room.
func (p *puller) copyFile(src, name string, size int64) error {
	if err := p.haveRoom(src, size); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := p.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if e := out.Sync(); err == nil {
		err = e
	}
	if e := out.Close(); err == nil {
		err = e
	}
	return err
}
