package hub

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// ImportOptions configure [Import].
type ImportOptions struct {
	// Src is the folder to import: a snapshot in the Hugging Face cache
	// (models--OWNER--NAME/snapshots/COMMIT), a folder that
	// `hf download --local-dir` or mlx_lm.convert wrote, any checkpoint.
	Src string
	// Dir is the model folder; default: the repository's name under
	// [ModelsRoot] for a snapshot, else Src's name there.
	Dir string
	// Progress receives Importing events, one at a time.
	Progress func(Event)
	// FreeSpace is as in [Options].
	FreeSpace func(dir string) (int64, error)
}

// Imported says what [Import] did.
type Imported struct {
	Dir       string
	Files     int
	Realigned int // shards rewritten aligned
	// Checked counts the files whose hash was known (a Hugging Face cache
	// blob is named by it) and matched; the others' hashes are recorded.
	Checked int
}

// snapshotPath matches a snapshot folder of the Hugging Face cache.
var snapshotPath = regexp.MustCompile(`(?:^|/)models--([A-Za-z0-9][A-Za-z0-9._-]*?)--([A-Za-z0-9][A-Za-z0-9._-]*)/snapshots/([0-9a-f]{40})$`)

// Import stores the files of an existing folder as a model folder, the
// way a pull would have: shards realigned (see [Pull]), other files
// hard-linked where the file system allows, every file hashed, the hash
// checked where it is known (the Hugging Face cache names each blob by its
// sha256, or git blob id for small files) and recorded in the manifest
// either way, so [Verify] works on the result. Files in hidden folders
// (.cache, .git) are left out. As with a pull, the checkpoint must open,
// and only a complete folder appears.
//
// A folder that a pull or an import made brings its manifest's hashes,
// repository and commit along. Given as its own Dir, a folder is
// realigned in place: the new folder is built beside it, linking what
// needs no change, and takes its place only once it is whole.
func Import(ctx context.Context, o ImportOptions) (*Imported, error) {
	src, err := filepath.Abs(o.Src)
	if err != nil {
		return nil, err
	}
	if info, err := os.Stat(src); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a folder", ErrInput, o.Src)
	}
	opts := Options{Dir: o.Dir, Progress: o.Progress, FreeSpace: o.FreeSpace}
	if m := snapshotPath.FindStringSubmatch(filepath.ToSlash(src)); m != nil {
		opts.Repo, opts.Revision = m[1]+"/"+m[2], m[3]
	}
	if opts.Dir == "" {
		name := filepath.Base(src)
		if opts.Repo != "" {
			name = filepath.Base(opts.Repo)
		}
		opts.Dir = filepath.Join(ModelsRoot(), name)
	}
	if opts.Dir, err = filepath.Abs(opts.Dir); err != nil {
		return nil, err
	}
	if opts.FreeSpace == nil {
		opts.FreeSpace = freeSpace
	}
	// The same folder is realigned in place; any other overlap would copy
	// a folder into itself.
	inPlace := opts.Dir == src
	if !inPlace && (within(opts.Dir, src) || within(src, opts.Dir)) {
		return nil, fmt.Errorf("%w: cannot import %s into %s, which overlaps it", ErrInput, src, opts.Dir)
	}
	files, sources, err := listFolder(src)
	if err != nil {
		return nil, err
	}
	// A folder a pull or an import made knows the Hub's hashes.
	prior, _ := readManifest(src)
	if prior != nil && opts.Repo == "" {
		opts.Repo, opts.Revision = prior.Repo, prior.Revision
	}
	if err := os.MkdirAll(filepath.Dir(opts.Dir), 0o755); err != nil {
		return nil, err
	}
	staging, lockPath := stagingPaths(opts.Dir)
	unlock, err := lock(lockPath)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !inPlace {
		if err := checkFree(opts.Dir); err != nil {
			return nil, err
		}
	}
	if _, err := os.Lstat(staging); err == nil {
		return nil, fmt.Errorf("%w: an unfinished pull into %s is on disk (resume or cancel it first)", ErrBusy, opts.Dir)
	}
	if err := os.Mkdir(staging, 0o755); err != nil {
		return nil, err
	}
	p := &puller{o: opts, staging: staging, source: src, replace: inPlace}
	rep, err := p.importAll(ctx, files, sources, prior)
	if err != nil {
		os.RemoveAll(staging)
		return nil, err
	}
	return rep, nil
}

// importAll stores every file and finishes the folder. Files that prior,
// the manifest of the folder imported, lists are checked against its
// hashes; a shard it lists as realigned is kept as it is.
func (p *puller) importAll(ctx context.Context, files []File, sources []string, prior *manifest) (*Imported, error) {
	var err error
	if p.root, err = os.OpenRoot(p.staging); err != nil {
		return nil, err
	}
	defer p.root.Close()
	p.listing = &Listing{Repo: p.o.Repo, SHA: p.o.Revision}
	if prior != nil {
		p.listing.SHA = prior.SHA
	}
	p.st = &state{Files: map[string]*fileState{}}
	rep := &Imported{Dir: p.o.Dir, Files: len(files)}
	for _, f := range files {
		p.total += f.Size
	}
	var done int64
	for i, f := range files {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		p.emit(Event{Phase: Importing, File: f.Name, Done: done, Total: p.total})
		done += f.Size
		pf, r, realigned := prior.lookup(f)
		if realigned {
			if err := p.keepRealigned(sources[i], pf, r); err != nil {
				return nil, err
			}
			rep.Checked++
			p.listing.Files = append(p.listing.Files, pf)
			p.st.Files[f.Name] = &fileState{Size: pf.Size, Verified: true, Stored: r.Size}
			continue
		}
		if pf.Name != "" {
			f = pf
		}
		sum, lay, err := p.storeFile(sources[i], f)
		if err != nil {
			return nil, err
		}
		if _, want := hasher(f); want != "" {
			if sum != want {
				return nil, fmt.Errorf("%w: %s: %s does not match the hash it is known by (damaged; download it again)", ErrChecksum, f.Name, sources[i])
			}
			rep.Checked++
		} else {
			f.SHA256 = sum
		}
		if err := p.keep(f.Name, lay); err != nil {
			return nil, err
		}
		if lay != nil {
			rep.Realigned++
		}
		p.listing.Files = append(p.listing.Files, f)
		p.st.Files[f.Name] = &fileState{Size: f.Size, Verified: true, Stored: lay.storedSize()}
	}
	return rep, p.finish()
}

// lookup finds f, as found on disk, in a manifest (m may be nil): its
// listed form, and whether it is stored realigned. A file whose size
// differs from what m says it was stored at is not found.
func (m *manifest) lookup(f File) (File, realignedFile, bool) {
	if m == nil {
		return File{}, realignedFile{}, false
	}
	for _, pf := range m.Files {
		if pf.Name != f.Name {
			continue
		}
		r, realigned := m.Realigned[f.Name]
		switch {
		case realigned && r.Size == f.Size:
			return pf, r, true
		case !realigned && pf.Size == f.Size:
			return pf, realignedFile{}, false
		}
	}
	return File{}, realignedFile{}, false
}

// keepRealigned links (or copies) a shard that an earlier pull stored
// realigned, checks it against the Hub's hash as Verify does, and keeps
// its original header region for the manifest.
func (p *puller) keepRealigned(src string, f File, r realignedFile) error {
	tmp := filepath.FromSlash(f.Name) + partSuffix
	if err := p.mkdirFor(f.Name); err != nil {
		return err
	}
	if err := os.Link(src, filepath.Join(p.staging, tmp)); err != nil {
		if err := p.copyFile(src, tmp, r.Size); err != nil {
			return err
		}
	}
	got, err := p.root.Open(tmp)
	if err != nil {
		return err
	}
	ok, err := checkRealigned(got, r.Size, r.OriginalHeader, r.HeaderSHA256, f)
	got.Close()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s: %s does not match the hash it is known by (damaged; download it again)", ErrChecksum, f.Name, src)
	}
	hp := headPath(f.Name)
	if err := p.root.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		return err
	}
	if err := p.root.WriteFile(hp, r.OriginalHeader, 0o644); err != nil {
		return err
	}
	return p.root.Rename(tmp, filepath.FromSlash(f.Name))
}

// listFolder lists the regular files under src (links followed), with the
// hash each is known by: a link into a Hugging Face cache's blobs folder
// names it.
func listFolder(src string) ([]File, []string, error) {
	var files []File
	var sources []string
	var total int64
	seen := map[string]bool{}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == src {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") && d.IsDir() {
			return fs.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if strings.HasPrefix(name, petalPrefix) {
			return nil // a Petal model folder's own files
		}
		if err := checkName(name); err != nil {
			return fmt.Errorf("%w: cannot import %s: %w", ErrInput, path, err)
		}
		folded := strings.ToLower(name)
		if seen[folded] {
			return fmt.Errorf("%w: %s: two files named %s but for case", ErrInput, src, name)
		}
		seen[folded] = true
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return err
		}
		info, err := os.Stat(real)
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file", ErrInput, path)
		}
		f := File{Name: name, Size: info.Size()}
		if filepath.Base(filepath.Dir(real)) == "blobs" {
			switch blob := filepath.Base(real); {
			case isHex(blob, 32):
				f.SHA256 = blob
			case isHex(blob, 20):
				f.BlobID = blob
			}
		}
		if total += f.Size; len(files) >= MaxFiles || f.Size > MaxFileBytes || total > MaxTotalBytes {
			return fmt.Errorf("%w: %s holds more than a model (%d files, %d bytes so far)", ErrInput, src, len(files)+1, total)
		}
		files, sources = append(files, f), append(sources, real)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if !slices.ContainsFunc(files, func(f File) bool { return f.Name == "config.json" }) {
		return nil, nil, fmt.Errorf("%w: %s has no config.json: not a checkpoint", ErrInput, src)
	}
	return files, sources, nil
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsLocal(rel)
}
