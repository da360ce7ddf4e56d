package doctor

import (
	"fmt"
	"path"
	"strings"

	"petal/shaders"
	"petal/shaders/selftest"
)

// kernels runs every self-test case once against its Go reference, then
// reps more times to time it: at the model's size where the case has one
// and modelSize is set (on a GPU the checked shapes time the launch, not the
// memory traffic).
// Each check names the file of every kernel the case dispatches.
func (run *runner) kernels(k *shaders.Kernels, files *sources, reps int, modelSize bool) {
	fileOf := map[string]string{}
	for _, f := range files.names {
		for _, fn := range kernelFunctions(files.text[f]) {
			fileOf[fn] = f
		}
	}
	for _, c := range selftest.Cases() {
		names := make([]string, len(c.Kernels))
		for i, fn := range c.Kernels {
			names[i] = path.Join(fileOf[fn], fn)
		}
		check := Check{Section: SectionKernel, Name: c.Name + " (" + strings.Join(names, ", ") + ")"}
		run.timed(&check, func() (string, error) {
			r, err := c.Run(k)
			if err != nil {
				return "", err
			}
			msg := "matches the Go reference; "
			if modelSize {
				if b, err := c.Bench(k); err != nil {
					return "", fmt.Errorf("setting up the model-size timing: %w", err)
				} else if b != nil {
					r, msg = b, msg+"at the model's size "
				}
			}
			best, err := r.Time(reps)
			if err != nil {
				return "", fmt.Errorf("timed run: %w", err)
			}
			check.GBPerSecond = float64(r.Bytes) / best.Seconds() / 1e9
			msg += fmt.Sprintf("%.3f ms for %s, %.3g GB/s", best.Seconds()*1e3, byteCount(r.Bytes), check.GBPerSecond)
			if bw := run.r.BandwidthGBps; bw > 0 {
				check.BandwidthShare = check.GBPerSecond / bw
				msg += fmt.Sprintf(" (%.1f%% of %g GB/s)", 100*check.BandwidthShare, bw)
			}
			return msg, nil
		})
	}
}

// byteCount shows n bytes in kB or MB.
func byteCount(n int64) string {
	if n >= 1e6 {
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f kB", float64(n)/1e3)
}
