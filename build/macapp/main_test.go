package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"howett.net/plist"
)

// repo is the repository root, seen from this package's folder.
const repo = "../.."

// wailsJSON is wails.json read as plain JSON, apart from the tool's reader.
func wailsJSON(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "wails.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkInfoPlist parses an Info.plist with a plist parser and checks what
// macOS needs of Petal's, against wails.json.
func checkInfoPlist(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var got map[string]any
	format, err := plist.Unmarshal(data, &got)
	if err != nil {
		t.Fatalf("Info.plist does not parse: %v\n%s", err, data)
	}
	if format != plist.XMLFormat {
		t.Errorf("Info.plist is a %s plist", plist.FormatNames[format])
	}
	w := wailsJSON(t)
	version := w["info"].(map[string]any)["productVersion"]
	for key, want := range map[string]any{
		"CFBundlePackageType":        "APPL",
		"CFBundleIdentifier":         "app.petal",
		"CFBundleName":               "Petal",
		"CFBundleExecutable":         w["outputfilename"],
		"CFBundleVersion":            version,
		"CFBundleShortVersionString": version,
		"CFBundleIconFile":           "iconfile",
		"LSUIElement":                true,
		"LSMinimumSystemVersion":     "14.0",
		"LSArchitecturePriority":     []any{"arm64"},
		"NSHighResolutionCapable":    true,
	} {
		if !reflect.DeepEqual(got[key], want) {
			t.Errorf("%s is %#v, want %#v", key, got[key], want)
		}
	}
	return got
}

func TestInfoPlist(t *testing.T) {
	p, err := loadProject(filepath.Join(repo, "wails.json"))
	if err != nil {
		t.Fatal(err)
	}
	data, info, err := renderInfoPlist(filepath.Join(repo, "build", "darwin", "Info.plist"), p)
	if err != nil {
		t.Fatal(err)
	}
	checkInfoPlist(t, data)
	if info != (bundleInfo{Name: "Petal", Executable: "petal", IconFile: "iconfile"}) {
		t.Errorf("the layout would follow %+v", info)
	}
}

func TestInfoPlistEscapesValues(t *testing.T) {
	var p project
	p.OutputFilename = "petal"
	p.Info.ProductName = `Pe & <tal>`
	p.Info.ProductVersion = "1.2.3"
	p.Info.Comments = `"quoted" & 'single'`
	data, info, err := renderInfoPlist(filepath.Join(repo, "build", "darwin", "Info.plist"), p)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if _, err := plist.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got["CFBundleGetInfoString"] != p.Info.Comments || info.Name != p.Info.ProductName {
		t.Errorf("read back %q and %q", got["CFBundleGetInfoString"], info.Name)
	}
}

func TestLoadProjectRefuses(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"outputfilename":"petal","info":{"productName":"Petal","productVersion":"0.1.0-beta"}}`, "not a bundle version"},
		{`{"outputfilename":"petal","info":{"productName":"Petal","productVersion":"1.2.3.4"}}`, "not a bundle version"},
		{`{"outputfilename":"../petal","info":{"productName":"Petal","productVersion":"1"}}`, "not a file name"},
		{`{"outputfilename":"petal","info":{"productVersion":"1"}}`, "productName is empty"},
		{`{"outputfilename":`, "unexpected end"},
	} {
		path := filepath.Join(t.TempDir(), "wails.json")
		if err := os.WriteFile(path, []byte(tc.json), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := loadProject(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.json, err, tc.want)
		}
	}
}

// standIn builds a trivial program for darwin on arch, the executable the
// bundle is assembled around where petal's desktop build cannot be made.
func standIn(t *testing.T, arch string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range map[string]string{
		"go.mod":  "module standin\n\ngo 1.22\n",
		"main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-o", "standin", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=darwin", "GOARCH="+arch, "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	return filepath.Join(dir, "standin")
}

// runScript runs scripts/macapp.sh with args and returns its output.
func runScript(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(repo, "scripts", "macapp.sh")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("macapp.sh %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestBundleScriptLayout(t *testing.T) {
	exe := standIn(t, "arm64")
	out := t.TempDir()
	// Twice: the second bundle replaces the first and leaves nothing behind.
	runScript(t, "--exe", exe, "--out", out)
	log := runScript(t, "--exe", exe, "--out", out)
	app := filepath.Join(out, "Petal.app")
	if runtime.GOOS != "darwin" && !strings.Contains(log, "not signed: "+app) {
		t.Errorf("off a Mac the script should say the bundle is unsigned:\n%s", log)
	}

	var files []string
	err := filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(out, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Petal.app/Contents/Info.plist", "Petal.app/Contents/MacOS/petal", "Petal.app/Contents/Resources/iconfile.icns"}
	if runtime.GOOS == "darwin" {
		want = append(want, "Petal.app/Contents/_CodeSignature/CodeResources")
	}
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Fatalf("the bundle holds %q, want %q", files, want)
	}

	data, err := os.ReadFile(filepath.Join(app, "Contents", "Info.plist"))
	if err != nil {
		t.Fatal(err)
	}
	info := checkInfoPlist(t, data)
	program := filepath.Join(app, "Contents", "MacOS", info["CFBundleExecutable"].(string))
	st, err := os.Stat(program)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o111 != 0o111 {
		t.Errorf("%s has mode %v: not executable", program, st.Mode())
	}
	if runtime.GOOS != "darwin" { // codesign rewrites it there
		built, _ := os.ReadFile(exe)
		bundled, _ := os.ReadFile(program)
		if !bytes.Equal(built, bundled) {
			t.Error("the bundled executable is not the one given")
		}
	}
	checkICNS(t, filepath.Join(app, "Contents", "Resources", info["CFBundleIconFile"].(string)+".icns"))
}

func TestBundleScriptOffMacNeedsAnExecutable(t *testing.T) {
	if runtime.GOOS == "darwin" {
		t.Skip("on a Mac the script builds the app itself")
	}
	cmd := exec.Command("bash", filepath.Join(repo, "scripts", "macapp.sh"), "--out", t.TempDir())
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "needs a Mac") {
		t.Errorf("without --exe off a Mac: %v\n%s", err, out)
	}
}

// checkICNS reads an .icns file element by element: its header's length
// matches the file, and each element named in icnsElements holds a PNG
// of its size.
func checkICNS(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 8 || string(data[:4]) != "icns" || int(binary.BigEndian.Uint32(data[4:])) != len(data) {
		t.Fatalf("%s: no icns header giving its length %d", path, len(data))
	}
	sides := map[string]int{}
	for rest := data[8:]; len(rest) > 0; {
		if len(rest) < 8 {
			t.Fatalf("%s: %d bytes of an element header at the end", path, len(rest))
		}
		n := int(binary.BigEndian.Uint32(rest[4:]))
		if n < 8 || n > len(rest) {
			t.Fatalf("%s: element %q has length %d with %d bytes left", path, rest[:4], n, len(rest))
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(rest[8:n]))
		if err != nil {
			t.Fatalf("%s: element %q: %v", path, rest[:4], err)
		}
		if cfg.Width != cfg.Height {
			t.Errorf("%s: element %q is %dx%d", path, rest[:4], cfg.Width, cfg.Height)
		}
		sides[string(rest[:4])] = cfg.Width
		rest = rest[n:]
	}
	want := map[string]int{"icp4": 16, "ic11": 32, "icp5": 32, "ic12": 64, "ic07": 128, "ic13": 256, "ic08": 256, "ic14": 512, "ic09": 512, "ic10": 1024}
	if !reflect.DeepEqual(sides, want) {
		t.Errorf("%s holds elements of sides %v, want %v", path, sides, want)
	}
}

func TestAssembleRefusesAndKeepsTheEarlierBundle(t *testing.T) {
	out := t.TempDir()
	app, err := assemble(repo, standIn(t, "arm64"), out)
	if err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(t.TempDir(), "petal")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ exe, want string }{
		{text, "not a Mach-O executable"},
		{standIn(t, "amd64"), "not an arm64 executable"},
		{filepath.Join(out, "missing"), "no such file"},
	} {
		if _, err := assemble(repo, tc.exe, out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.exe, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(app, "Contents", "MacOS", "petal")); err != nil {
		t.Errorf("a refused assembly broke the earlier bundle: %v", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("the output folder holds %d entries, want only the bundle", len(entries))
	}
}

func TestHalveAveragesEachSquare(t *testing.T) {
	src := image.NewRGBA(image.Rect(0, 0, 4, 4))
	// The top-left square: opaque red, half-transparent red (premultiplied),
	// transparent and opaque black.
	src.SetRGBA(0, 0, color.RGBA{R: 255, A: 255})
	src.SetRGBA(1, 0, color.RGBA{R: 128, A: 128})
	src.SetRGBA(1, 1, color.RGBA{A: 255})
	src.SetRGBA(3, 3, color.RGBA{G: 9, B: 10, A: 10})
	dst := halve(src)
	if dst.Bounds() != image.Rect(0, 0, 2, 2) {
		t.Fatalf("halved to %v", dst.Bounds())
	}
	for _, tc := range []struct {
		x, y int
		want color.RGBA
	}{
		{0, 0, color.RGBA{R: 96, A: 160}}, // (255+128+2)/4, (255+128+255+2)/4
		{1, 0, color.RGBA{}},
		{1, 1, color.RGBA{G: 2, B: 3, A: 3}}, // rounded to nearest
	} {
		if got := dst.RGBAAt(tc.x, tc.y); got != tc.want {
			t.Errorf("(%d,%d) = %v, want %v", tc.x, tc.y, got, tc.want)
		}
	}
}

func TestMakeICNSRefusesOtherSizes(t *testing.T) {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 512, 512))); err != nil {
		t.Fatal(err)
	}
	if _, err := makeICNS(b.Bytes()); err == nil || !strings.Contains(err.Error(), "not 1024x1024") {
		t.Errorf("a 512-pixel icon: %v", err)
	}
	if _, err := makeICNS([]byte("GIF89a")); err == nil {
		t.Error("a GIF accepted")
	}
}
