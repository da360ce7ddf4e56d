// Command macapp assembles Petal.app, the macOS bundle, around a
// darwin/arm64 build of petal:
//
//	Petal.app/Contents/Info.plist               build/darwin/Info.plist rendered with wails.json
//	Petal.app/Contents/MacOS/<executable>       the build, under the name the plist gives it
//	Petal.app/Contents/Resources/<icon>.icns    build/appicon.png at every size Finder asks for
//
// wails.json is the one place where the name, the executable's name and the
// version are set. The tool needs no Mac: scripts/macapp.sh runs it and, on
// a Mac, builds the executable first and signs the bundle after, and the
// tests run it here around a stand-in executable.
//
// Usage:
//
//	go run ./build/macapp -exe FILE [-out DIR] [-root DIR]
//
// It prints the path of the bundle, which replaces any earlier one there.
package main

import (
	"bytes"
	"debug/macho"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"howett.net/plist"
)

func main() {
	exe := flag.String("exe", "", "the darwin/arm64 executable to bundle (required)")
	out := flag.String("out", filepath.Join("build", "bin"), "the folder the bundle is written into")
	root := flag.String("root", ".", "the repository, which holds wails.json and build/")
	flag.Parse()
	if *exe == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	app, err := assemble(*root, *exe, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "macapp:", err)
		os.Exit(1)
	}
	fmt.Println(app)
}

// project holds the fields of wails.json that the Info.plist template uses,
// under the names the Wails CLI gives them.
type project struct {
	Name           string `json:"name"`
	OutputFilename string `json:"outputfilename"`
	Info           struct {
		CompanyName    string `json:"companyName"`
		ProductName    string `json:"productName"`
		ProductVersion string `json:"productVersion"`
		Comments       string `json:"comments"`
	} `json:"info"`
}

// bundleVersion is what CFBundleVersion may hold: up to three integers
// separated by dots.
var bundleVersion = regexp.MustCompile(`^[0-9]+(\.[0-9]+){0,2}$`)

// loadProject reads and checks wails.json.
func loadProject(path string) (project, error) {
	var p project
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case p.Info.ProductName == "":
		return p, fmt.Errorf("%s: info.productName is empty", path)
	case p.OutputFilename == "" || p.OutputFilename != filepath.Base(p.OutputFilename) || strings.HasPrefix(p.OutputFilename, "."):
		return p, fmt.Errorf("%s: outputfilename %q is not a file name", path, p.OutputFilename)
	case !bundleVersion.MatchString(p.Info.ProductVersion):
		return p, fmt.Errorf("%s: info.productVersion %q is not a bundle version (up to three integers separated by dots, as 1.2.3)", path, p.Info.ProductVersion)
	}
	return p, nil
}

// bundleInfo is what the assembly takes from the rendered Info.plist, so
// that the bundle's layout follows what the plist says.
type bundleInfo struct {
	Name       string `plist:"CFBundleName"`
	Executable string `plist:"CFBundleExecutable"`
	IconFile   string `plist:"CFBundleIconFile"`
}

// renderInfoPlist renders the template at tmplPath with p's values, escaped
// for XML, and reads back what the layout needs.
func renderInfoPlist(tmplPath string, p project) ([]byte, bundleInfo, error) {
	var info bundleInfo
	src, err := os.ReadFile(tmplPath)
	if err != nil {
		return nil, info, err
	}
	t, err := template.New(filepath.Base(tmplPath)).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, info, err
	}
	esc := func(s *string) {
		var b strings.Builder
		xml.EscapeText(&b, []byte(*s)) // writes to a strings.Builder, which cannot fail
		*s = b.String()
	}
	for _, s := range []*string{&p.Name, &p.OutputFilename, &p.Info.CompanyName, &p.Info.ProductName, &p.Info.ProductVersion, &p.Info.Comments} {
		esc(s)
	}
	var out bytes.Buffer
	if err := t.Execute(&out, p); err != nil {
		return nil, info, err
	}
	format, err := plist.Unmarshal(out.Bytes(), &info)
	if err != nil {
		return nil, info, fmt.Errorf("%s renders to an invalid plist: %w", tmplPath, err)
	}
	if format != plist.XMLFormat {
		return nil, info, fmt.Errorf("%s renders to a %s plist, not XML", tmplPath, plist.FormatNames[format])
	}
	for key, v := range map[string]string{"CFBundleName": info.Name, "CFBundleExecutable": info.Executable, "CFBundleIconFile": info.IconFile} {
		if v == "" || v != filepath.Base(v) || strings.HasPrefix(v, ".") {
			return nil, info, fmt.Errorf("%s: %s %q is not a file name", tmplPath, key, v)
		}
	}
	return out.Bytes(), info, nil
}

// checkExecutable makes sure exe is a program an Apple silicon Mac runs.
func checkExecutable(exe string) error {
	f, err := macho.Open(exe)
	if err != nil {
		var fe *macho.FormatError
		if errors.As(err, &fe) {
			return fmt.Errorf("%s is not a Mach-O executable (build it with GOOS=darwin GOARCH=arm64): %w", exe, err)
		}
		return err
	}
	defer f.Close()
	if f.Cpu != macho.CpuArm64 || f.Type != macho.TypeExec {
		return fmt.Errorf("%s is a Mach-O %v of type %v, not an arm64 executable", exe, f.Cpu, f.Type)
	}
	return nil
}

// assemble writes <out>/<CFBundleName>.app around exe and returns its path.
func assemble(root, exe, out string) (string, error) {
	p, err := loadProject(filepath.Join(root, "wails.json"))
	if err != nil {
		return "", err
	}
	infoPlist, info, err := renderInfoPlist(filepath.Join(root, "build", "darwin", "Info.plist"), p)
	if err != nil {
		return "", err
	}
	if err := checkExecutable(exe); err != nil {
		return "", err
	}
	program, err := os.ReadFile(exe)
	if err != nil {
		return "", err
	}
	iconPNG, err := os.ReadFile(filepath.Join(root, "build", "appicon.png"))
	if err != nil {
		return "", err
	}
	icns, err := makeICNS(iconPNG)
	if err != nil {
		return "", fmt.Errorf("build/appicon.png: %w", err)
	}
	iconFile := info.IconFile
	if filepath.Ext(iconFile) != ".icns" {
		iconFile += ".icns"
	}

	// The bundle is written beside its final place and then put there, so
	// that a failure leaves any earlier bundle whole.
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	app := filepath.Join(out, info.Name+".app")
	tmp, err := os.MkdirTemp(out, "."+info.Name+".app-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	contents := filepath.Join(tmp, "Contents")
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{filepath.Join(contents, "Info.plist"), infoPlist, 0o644},
		{filepath.Join(contents, "MacOS", info.Executable), program, 0o755},
		{filepath.Join(contents, "Resources", iconFile), icns, 0o644},
	} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.RemoveAll(app); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, app); err != nil {
		return "", err
	}
	return app, nil
}
