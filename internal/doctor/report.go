package doctor

import (
	"fmt"
	"io"
	"strings"
)

// WriteText writes the report as a user pastes it into a bug report: a
// header saying what ran where, one line per check, a failure's whole
// message indented under it, and a summary.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "petal doctor, %s backend, %s\n", r.Backend, r.Started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "device: %s\nos: %s %s\nshaders: %s\n\n", orUnknown(r.Device), r.OS, r.Arch, r.Shaders)
	for _, c := range r.Checks {
		b.WriteString(c.Line())
		b.WriteByte('\n')
	}
	verdict := "all checks passed"
	if !r.Pass {
		verdict = fmt.Sprintf("%d of %d checks FAILED", r.Failed, len(r.Checks))
	}
	if r.Skipped > 0 {
		verdict += fmt.Sprintf(", %d skipped", r.Skipped)
		if r.Pass {
			verdict = fmt.Sprintf("all %d checks that ran passed, %d skipped", len(r.Checks)-r.Skipped, r.Skipped)
		}
	}
	fmt.Fprintf(&b, "\n%s in %.1f s\n", verdict, r.Seconds)
	_, err := io.WriteString(w, b.String())
	return err
}

// Line is the check as the text report shows it; a failure's message
// follows on indented lines, whole.
func (c Check) Line() string {
	status := "PASS"
	switch {
	case c.Skipped:
		status = "SKIP"
	case !c.Pass:
		status = "FAIL"
	}
	line := fmt.Sprintf("%s %-7s %s", status, c.Section, c.Name)
	if c.Pass || c.Skipped {
		return line + ": " + c.Message
	}
	return line + "\n    " + strings.ReplaceAll(strings.TrimRight(c.Message, "\n"), "\n", "\n    ")
}

func orUnknown(s string) string {
	if s == "" {
		return "(not opened)"
	}
	return s
}
