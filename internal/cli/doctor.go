package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"petal/internal/doctor"
)

func init() {
	commands["doctor"] = command{
		summary: "check this machine's GPU path: compile and test every kernel, run the demo model, print a report",
		run:     runDoctor,
	}
}

// errChecksFailed makes the exit status 1 after a report with failures.
var errChecksFailed = errors.New("doctor: some checks failed (see the report)")

func runDoctor(args []string, stdout io.Writer) error {
	fl := newFlags("doctor", os.Stderr)
	backend := fl.String("backend", doctor.DefaultBackend(), "metal or sim")
	asJSON := fl.Bool("json", false, "print the report as JSON")
	dir := fl.String("shaders", "", "compile the kernel sources in DIR instead of the embedded ones")
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	var src fs.FS
	if *dir != "" {
		if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
			return fmt.Errorf("--shaders %s: not a directory", *dir)
		}
		src = os.DirFS(*dir)
	}
	opts := doctor.Options{Backend: *backend, Shaders: src}
	if !*asJSON {
		opts.Progress = progressDots(os.Stderr)
	}
	r, err := doctor.Run(opts)
	if !*asJSON {
		fmt.Fprintln(os.Stderr)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		err = r.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if !r.Pass {
		return errChecksFailed
	}
	return nil
}

// progressDots shows a run's progress on w as a dot per passed check and
// an F per failed one, a line per section, so a slow first compile shows it
// is working without printing the report twice.
func progressDots(w io.Writer) func(doctor.Check) {
	section := ""
	return func(c doctor.Check) {
		if c.Section != section {
			if section != "" {
				fmt.Fprintln(w)
			}
			section = c.Section
			fmt.Fprintf(w, "%-8s", section)
		}
		mark := "."
		if !c.Pass {
			mark = "F"
		}
		fmt.Fprint(w, mark)
	}
}
