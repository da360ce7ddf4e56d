package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/internal/doctor"
)

// Flags doctor cannot act on are refused before anything runs.
func TestDoctorRefusesBadFlags(t *testing.T) {
	if err := Run([]string{"doctor", "--backend", "cuda"}, io.Discard); !errors.Is(err, doctor.ErrBackend) {
		t.Errorf("--backend cuda: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if err := Run([]string{"doctor", "--shaders", missing}, io.Discard); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("--shaders %s: %v", missing, err)
	}
	if err := Run([]string{"doctor", "extra"}, io.Discard); err == nil {
		t.Error("accepted a stray argument")
	}
}

func TestDoctorProgressDots(t *testing.T) {
	var b strings.Builder
	p := progressDots(&b)
	for _, c := range []doctor.Check{
		{Section: doctor.SectionDevice, Pass: true}, {Section: doctor.SectionDevice, Pass: true},
		{Section: doctor.SectionCompile, Pass: false}, {Section: doctor.SectionCompile, Pass: true},
		{Section: doctor.SectionKernel, Pass: true}, {Section: doctor.SectionKernel, Skipped: true},
	} {
		p(c)
	}
	if want := "device  ..\ncompile F.\nkernel  .s"; b.String() != want {
		t.Errorf("progress %q, want %q", b.String(), want)
	}
}

// petal doctor --backend sim --compile-only compiles every kernel and exits
// 0 without running a self-test or the model.
func TestDoctorCompileOnly(t *testing.T) {
	var out bytes.Buffer
	if err := Run([]string{"doctor", "--backend", "sim", "--compile-only", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r doctor.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	compiled := 0
	for _, c := range r.Checks {
		switch c.Section {
		case doctor.SectionCompile:
			compiled++
		case doctor.SectionKernel, doctor.SectionModel:
			t.Errorf("compile-only ran %s", c.Line())
		}
	}
	if !r.Pass || compiled < 2 {
		t.Errorf("Pass %v with %d compile checks", r.Pass, compiled)
	}
}

// --specialize DIR writes the kernel files for xcrun metal and lists each,
// a line per file, with the kernel file and constant set it holds.
func TestDoctorSpecialize(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := Run([]string{"doctor", "--specialize", dir}, &out); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != len(entries) || len(lines) == 0 {
		t.Fatalf("%d files written, %d listed:\n%s", len(entries), len(lines), out.String())
	}
	sets := 0
	for _, l := range lines {
		path, what, ok := strings.Cut(l, "\t")
		if _, err := os.Stat(path); !ok || err != nil || filepath.Dir(path) != dir || !strings.Contains(what, ".metal") {
			t.Errorf("line %q: %v", l, err)
		}
		if strings.Contains(what, " [") {
			sets++
		}
	}
	if sets == 0 {
		t.Errorf("no file with a constant set listed:\n%s", out.String())
	}
}
