package hub

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// pinnedFS holds the pinned tensor manifests committed in the repository
// (see pinned/README.md for the format and how they are made).
//
//go:embed pinned
var pinnedFS embed.FS

// ErrNotPinned reports a repository whose tensors have no pinned manifest:
// nothing of it is fetched, since nothing could be checked.
var ErrNotPinned = errors.New("hub: no pinned manifest of these tensors is committed")

// PinnedName is the file under internal/hub/pinned that pins filter's
// tensors of repo.
func PinnedName(repo string, filter TensorFilter) string {
	return strings.ReplaceAll(repo, "/", "--") + "." + filter.Name + ".json"
}

// PinnedManifest returns the committed manifest of filter's tensors of
// repo, or an error marked [ErrNotPinned] when there is none.
func PinnedManifest(repo string, filter TensorFilter) (*TensorManifest, error) {
	return pinnedFrom(pinnedFS, "pinned/"+PinnedName(repo, filter), repo, filter)
}

func pinnedFrom(fsys fs.FS, name, repo string, filter TensorFilter) (*TensorManifest, error) {
	data, err := fs.ReadFile(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s's %s tensors (internal/hub/%s)", ErrNotPinned, repo, filter.Name, name)
	}
	if err != nil {
		return nil, err
	}
	m, err := ParseTensorManifest(data)
	if err != nil {
		return nil, err
	}
	if m.Repo != repo || m.Filter != filter.Name {
		return nil, fmt.Errorf("%w: %s pins %s's %s tensors", ErrBadListing, name, m.Repo, m.Filter)
	}
	return m, nil
}
