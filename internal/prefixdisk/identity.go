package prefixdisk

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The files CheckpointIdentity reads.
const (
	// manifestFile is the manifest a pull or import writes, which holds
	// every file's Hub hash: the checkpoint's identity when present.
	manifestFile = ".petal-manifest.json"
	configFile   = "config.json"
	// identityHeadBytes is how much of each weights file CheckpointIdentity
	// hashes without a manifest: the safetensors header (names, shapes,
	// offsets) and the first weights. Hashing whole files would take
	// minutes at every start on a 20 GB model.
	identityHeadBytes = 1 << 20
	// maxManifestBytes bounds the manifest read.
	maxManifestBytes = 16 << 20
)

// CheckpointIdentity identifies the checkpoint in dir for the prefix
// cache: the hash of its manifest when it has one, else of its config and,
// for every weights file, its name, size, modification time and first
// identityHeadBytes, so a changed file changes it.
func CheckpointIdentity(dir string) (string, error) {
	h := sha256.New()
	if f, err := os.Open(filepath.Join(dir, manifestFile)); err == nil {
		defer f.Close()
		h.Write([]byte("manifest\x00"))
		if _, err := io.Copy(h, io.LimitReader(f, maxManifestBytes)); err != nil {
			return "", fmt.Errorf("prefixdisk: %w", err)
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	config, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil {
		return "", fmt.Errorf("prefixdisk: %w", err)
	}
	h.Write([]byte("files\x00"))
	h.Write(config)
	des, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("prefixdisk: %w", err)
	}
	var names []string
	for _, de := range des {
		if strings.HasSuffix(de.Name(), ".safetensors") {
			names = append(names, de.Name())
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := hashHead(h, filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("prefixdisk: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashHead(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "\x00%s\x00%d\x00%d\x00", filepath.Base(path), info.Size(), info.ModTime().UnixNano())
	_, err = io.Copy(h, io.LimitReader(f, identityHeadBytes))
	return err
}
