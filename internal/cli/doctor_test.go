package cli

import (
	"errors"
	"io"
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
		{Section: doctor.SectionKernel, Pass: true},
	} {
		p(c)
	}
	if want := "device  ..\ncompile F.\nkernel  ."; b.String() != want {
		t.Errorf("progress %q, want %q", b.String(), want)
	}
}
