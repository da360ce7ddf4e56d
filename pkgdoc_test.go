package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs requires a package comment in every Go package of the
// module, whatever its build constraints (darwin-only and desktop-tagged
// files count too), and that the comment introduces the package or command
// by name, so that a licence header or a stray note cannot pass for one.
func TestPackageDocs(t *testing.T) {
	dirs, err := goPackageDirs(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 2 {
		t.Fatalf("found %d Go package folders under the module root; the walk is broken", len(dirs))
	}
	for _, dir := range dirs {
		if err := checkPackageDoc(dir); err != nil {
			t.Error(err)
		}
	}
}

// TestCheckPackageDoc proves the check fails on the cases it exists for.
func TestCheckPackageDoc(t *testing.T) {
	cases := []struct {
		name, src string
		ok        bool
	}{
		{"documented", "// Package p does things.\npackage p\n", true},
		{"command", "// Command p does things.\npackage main\n", true},
		{"missing", "package p\n", false},
		{"detached", "// Package p does things.\n\npackage p\n", false},
		{"licence header", "// Copyright 2026 Someone.\npackage p\n", false},
		{"wrong name", "// Package q does things.\npackage p\n", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(c.src), 0o644); err != nil {
				t.Fatal(err)
			}
			err := checkPackageDoc(dir)
			if c.ok && err != nil {
				t.Errorf("checkPackageDoc: %v, want nil", err)
			}
			if !c.ok && err == nil {
				t.Errorf("checkPackageDoc: nil, want an error")
			}
		})
	}
}

// goPackageDirs lists the folders under root that hold non-test Go files,
// leaving out what the go command leaves out: testdata, node_modules
// (the frontend's), and names starting with "." or "_".
func goPackageDirs(root string) ([]string, error) {
	seen := map[string]bool{}
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "node_modules" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			if dir := filepath.Dir(path); !seen[dir] {
				seen[dir] = true
				dirs = append(dirs, dir)
			}
		}
		return nil
	})
	return dirs, err
}

// checkPackageDoc parses the package clauses of dir's non-test files and
// fails unless one of them carries a package comment that starts with
// "Package <name> " or, for package main, "Command ".
func checkPackageDoc(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checking the package doc of %s: %w", dir, err)
	}
	fset := token.NewFileSet()
	var pkg, wrong string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return fmt.Errorf("checking the package doc of %s: %w", dir, err)
		}
		pkg = f.Name.Name
		if f.Doc == nil {
			continue
		}
		text := f.Doc.Text()
		if strings.HasPrefix(text, "Package "+pkg+" ") || (pkg == "main" && strings.HasPrefix(text, "Command ")) {
			return nil
		}
		wrong = name + ": " + strings.SplitN(text, "\n", 2)[0]
	}
	if wrong != "" {
		return fmt.Errorf("package %s in %s: the package comment (%s) does not start with \"Package %s\" (or \"Command\" for package main)", pkg, dir, wrong, pkg)
	}
	return fmt.Errorf("package %s in %s has no package comment (add a doc.go)", pkg, dir)
}

// TestEngineDocListsPackages: engine/doc.go's layer list names every
// package under engine/, so that a new one cannot go unlisted.
func TestEngineDocListsPackages(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("engine", "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := goPackageDirs("engine")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		if dir == "engine" {
			continue
		}
		if !strings.Contains(string(doc), "//\t"+filepath.ToSlash(dir)+" ") {
			t.Errorf("engine/doc.go does not list %s", dir)
		}
	}
}
