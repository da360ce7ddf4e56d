package hub

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// snapshotDir is where the Hugging Face cache keeps repo at commit sha.
func snapshotDir(cache, repo, sha string) string {
	return filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"), "snapshots", sha)
}

// importCache takes every file the Hugging Face cache holds at the
// listing's commit, hard-linked (copied across file systems), each hashed
// like a download. A file that does not match is left to the download.
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
		ok, err := p.importFile(src, f)
		if err != nil {
			return err
		}
		if ok {
			p.st.Files[f.Name] = &fileState{Size: f.Size, Verified: true}
			if err := p.saveState(); err != nil {
				return err
			}
		}
	}
	return nil
}

// importFile links or copies src to f's temporary name, hashes what it
// got, and renames it into place; false when the content is not f's.
func (p *puller) importFile(src string, f File) (bool, error) {
	name := filepath.FromSlash(f.Name)
	tmp := name + partSuffix
	if dir := path.Dir(f.Name); dir != "." {
		if err := p.root.MkdirAll(filepath.FromSlash(dir), 0o755); err != nil {
			return false, err
		}
	}
	p.root.Remove(tmp)
	if err := os.Link(src, filepath.Join(p.staging, tmp)); err != nil {
		if err := p.copyFile(src, tmp, f.Size); err != nil {
			return false, err
		}
	}
	got, err := p.root.Open(tmp)
	if err != nil {
		return false, err
	}
	ok, err := verify(got, f)
	got.Close()
	if err != nil || !ok {
		p.root.Remove(tmp)
		return false, err
	}
	return true, p.root.Rename(tmp, name)
}

// copyFile copies src to name in the staging folder, if the disk has room.
func (p *puller) copyFile(src, name string, size int64) error {
	free, err := p.o.FreeSpace(p.staging)
	if err != nil {
		return err
	}
	if free < size+DiskMargin {
		return fmt.Errorf("%w: copying %s from the Hugging Face cache needs %.2f GB; %.2f GB are free",
			ErrNoSpace, src, float64(size+DiskMargin)/1e9, float64(free)/1e9)
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
