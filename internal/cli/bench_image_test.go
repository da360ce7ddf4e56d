package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestBenchImageEncode: an arm on a model that reads images (vision-a)
// reports the tower over the 1024x768 image: its 64x48 patches and the 768
// merged tokens that come back; a text-only model's arm reports none. On
// the CPU only: the sim emulates the device tower's 3072-patch attention
// thread by thread (289 s for vision-a's tiny tower on this 2-core
// machine); engine/gpumodel's tests check that tower.
func TestBenchImageEncode(t *testing.T) {
	vision := filepath.Join(filepath.Dir(benchFixture), "vision-a")
	arm := func(model, backend string) benchArm {
		var out bytes.Buffer
		if err := Run([]string{"bench", "--arm", "--model", model, "--backend", backend, "--context", "8", "--steps", "2"}, &out); err != nil {
			t.Fatal(err)
		}
		var a benchArm
		if err := json.Unmarshal(out.Bytes(), &a); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return a
	}
	for _, backend := range []string{"cpu"} {
		im := arm(vision, backend).ImageEncode
		if im == nil {
			t.Fatalf("%s: no image encode reported for vision-a", backend)
		}
		t.Logf("%s: %+v", backend, *im)
		if im.Width != benchImageWidth || im.Height != benchImageHeight || im.Patches != 64*48 || im.Tokens != 64*48/4 || !(im.WallSecs > 0) {
			t.Errorf("%s: %+v", backend, *im)
		}
	}
	if im := arm(benchFixture, "cpu").ImageEncode; im != nil {
		t.Errorf("a text-only model's arm reports an image encode: %+v", *im)
	}
}
