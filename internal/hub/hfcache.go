package hub

import (
	"context"
	"encoding/hex"
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

// importFile links or copies src to f's temporary name, hashes what it
// got, and renames it into place; false when the content is not f's. A
// shard that needs realigning is rewritten instead; its stored size is
// returned (0 for a file kept as it is).
func (p *puller) importFile(src string, f File) (bool, int64, error) {
	name := filepath.FromSlash(f.Name)
	tmp := name + partSuffix
	if err := p.mkdirFor(f.Name); err != nil {
		return false, 0, err
	}
	if realigns(f) {
		lay, err := layoutOf(src, f.Size)
		if err != nil {
			return false, 0, nil // not a shard this pull can use: download it
		}
		if !lay.verbatim {
			ok, err := p.importRealigned(src, f, lay)
			return ok, lay.size, err
		}
	}
	p.root.Remove(tmp)
	if err := os.Link(src, filepath.Join(p.staging, tmp)); err != nil {
		if err := p.copyFile(src, tmp, f.Size); err != nil {
			return false, 0, err
		}
	}
	got, err := p.root.Open(tmp)
	if err != nil {
		return false, 0, err
	}
	ok, err := verify(got, f)
	got.Close()
	if err != nil || !ok {
		p.root.Remove(tmp)
		return false, 0, err
	}
	return true, 0, p.root.Rename(tmp, name)
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

// importRealigned writes the stored form of the shard at src to f's
// temporary name, hashing the original as it is read, and renames it into
// place if the hash is f's; its original header region goes to the heads
// folder.
func (p *puller) importRealigned(src string, f File, lay *layout) (bool, error) {
	name := filepath.FromSlash(f.Name)
	tmp := name + partSuffix
	if err := p.haveRoom(src, lay.size); err != nil {
		return false, err
	}
	in, err := os.Open(src)
	if err != nil {
		return false, err
	}
	defer in.Close()
	if _, err := in.Seek(lay.origData, io.SeekStart); err != nil {
		return false, err
	}
	out, err := p.root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return false, err
	}
	h, want := hasher(f)
	n, err := writeRealigned(out, in, lay, h)
	if e := out.Sync(); err == nil {
		err = e
	}
	if e := out.Close(); err == nil {
		err = e
	}
	if err != nil || n != f.Size || hex.EncodeToString(h.Sum(nil)) != want {
		p.root.Remove(tmp)
		return false, err
	}
	hp := headPath(f.Name)
	if err := p.root.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		return false, err
	}
	if err := p.root.WriteFile(hp, lay.origHead, 0o644); err != nil {
		return false, err
	}
	return true, p.root.Rename(tmp, name)
}

// haveRoom checks that the disk has room for a copy of size bytes of src.
func (p *puller) haveRoom(src string, size int64) error {
	free, err := p.o.FreeSpace(p.staging)
	if err != nil {
		return err
	}
	if free < size+DiskMargin {
		return fmt.Errorf("%w: copying %s from the Hugging Face cache needs %.2f GB; %.2f GB are free",
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
