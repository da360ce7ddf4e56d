package shaders

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

//go:embed *.metal *.h
var files embed.FS

// ErrNotFound is returned for a name that is not an embedded shader file.
var ErrNotFound = errors.New("shaders: no such file")

// maxIncludeDepth bounds nested local includes (a cycle would recurse forever).
const maxIncludeDepth = 8

// Names lists the embedded .metal files, sorted.
func Names() []string {
	m, _ := fs.Glob(files, "*.metal")
	sort.Strings(m)
	return m
}

// Files is the embedded kernel sources (.metal and .h) that [Source] reads.
func Files() fs.FS { return files }

// Source returns the named .metal file with its local includes expanded.
func Source(name string) (string, error) { return SourceFS(files, name) }

// SourceFS is [Source] over the kernel sources in fsys, so a tool can
// compile a copy of shaders/ other than the embedded one (petal doctor
// --shaders).
func SourceFS(fsys fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return "", fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return expandFS(fsys, name, string(b))
}

// Expand replaces each `#include "file"` line of text with the embedded
// file's own expansion, once per file (later includes of the same file
// expand to nothing, like an include guard), and leaves <system> includes
// alone. name labels errors.
func Expand(name, text string) (string, error) { return expandFS(files, name, text) }

func expandFS(fsys fs.FS, name, text string) (string, error) {
	seen := map[string]bool{}
	var b strings.Builder
	if err := expand(&b, fsys, name, text, seen, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func expand(b *strings.Builder, fsys fs.FS, name, text string, seen map[string]bool, depth int) error {
	if depth > maxIncludeDepth {
		return fmt.Errorf("shaders: %s: includes nested deeper than %d", name, maxIncludeDepth)
	}
	for i, line := range strings.SplitAfter(text, "\n") {
		inc, ok := localInclude(line)
		if !ok {
			b.WriteString(line)
			continue
		}
		inc = path.Clean(inc)
		if seen[inc] {
			b.WriteString("\n")
			continue
		}
		seen[inc] = true
		body, err := fs.ReadFile(fsys, inc)
		if err != nil {
			return fmt.Errorf("shaders: %s:%d: %w: %s", name, i+1, ErrNotFound, inc)
		}
		// #line keeps compiler messages pointing at the right file and line.
		fmt.Fprintf(b, "#line 1 %q\n", inc)
		if err := expand(b, fsys, inc, string(body), seen, depth+1); err != nil {
			return err
		}
		fmt.Fprintf(b, "\n#line %d %q\n", i+2, name)
	}
	return nil
}

// localInclude reports the file of an `#include "file"` line.
func localInclude(line string) (string, bool) {
	s := strings.TrimSpace(line)
	if !strings.HasPrefix(s, "#") {
		return "", false
	}
	s = strings.TrimSpace(s[1:])
	if !strings.HasPrefix(s, "include") {
		return "", false
	}
	s = strings.TrimSpace(s[len("include"):])
	if len(s) < 2 || s[0] != '"' {
		return "", false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return "", false
	}
	return s[1 : 1+end], true
}
