package hub

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Verify hashes every file of a model folder that a pull finished against
// the hashes its manifest recorded from the Hub (sha256 for LFS files, the
// git blob id otherwise): the Setup screen's Verify button, for a folder
// that may have been touched since. A shard stored realigned is checked
// by rebuilding the original's bytes from it (see [Pull]); its header
// region must hash as recorded. It returns an error marked [ErrChecksum]
// naming the first file that differs.
func Verify(dir string) error {
	m, err := readManifest(dir)
	if err != nil {
		return fmt.Errorf("%w: %s is not a model folder Petal pulled: %w", ErrInput, dir, err)
	}
	for _, f := range m.Files {
		if err := checkName(f.Name); err != nil {
			return fmt.Errorf("%w: manifest of %s: %w", ErrBadListing, dir, err)
		}
		file, err := os.Open(filepath.Join(dir, filepath.FromSlash(f.Name)))
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrChecksum, f.Name, err)
		}
		var ok bool
		if rf, realigned := m.Realigned[f.Name]; realigned {
			var info os.FileInfo
			if info, err = file.Stat(); err == nil && info.Size() == rf.Size {
				ok, err = checkRealigned(file, rf.Size, rf.OriginalHeader, rf.HeaderSHA256, f)
			}
		} else {
			ok, err = verify(file, f)
		}
		file.Close()
		if err != nil {
			return fmt.Errorf("hub: reading %s: %w", f.Name, err)
		}
		if !ok {
			return fmt.Errorf("%w: %s (download the model again)", ErrChecksum, f.Name)
		}
	}
	// A file Petal derives is renamed into the folder before the manifest
	// lists it: one there but unlisted is an install cut short, never
	// checked against its source, which the loader would bind all the same.
	for _, name := range derivedNames {
		if !slices.ContainsFunc(m.Files, func(f File) bool { return f.Name == name }) && present(filepath.Join(dir, name)) {
			return fmt.Errorf("%w: %s is in the folder but not in its manifest (its install did not finish): pull the model again to fetch and list it", ErrChecksum, name)
		}
	}
	return nil
}

// Finished reports whether dir is a model folder that a pull finished
// (it has the manifest a pull writes last), without hashing anything.
func Finished(dir string) bool {
	_, err := readManifest(dir)
	return err == nil
}

// present reports whether path names something, a file or not.
func present(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
