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
	compileOnly := fl.Bool("compile-only", false, "only open the device and compile every kernel with each function-constant set the ops use; run nothing on the GPU")
	specialize := fl.String("specialize", "", "write each kernel file into `DIR` once per function-constant set the ops use, the constants fixed, for Apple's offline compiler (xcrun metal); run no check")
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
	if *specialize != "" {
		return writeSpecialized(stdout, *specialize, src)
	}
	opts := doctor.Options{Backend: *backend, Shaders: src, CompileOnly: *compileOnly}
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
		switch {
		case c.Skipped:
			mark = "s"
		case !c.Pass:
			mark = "F"
		}
		fmt.Fprint(w, mark)
	}
}

// writeSpecialized runs doctor.Specialize and lists what it wrote, a file a
// line: its path, then the kernel file and constant set it holds.
func writeSpecialized(stdout io.Writer, dir string, src fs.FS) error {
	files, err := doctor.Specialize(dir, src)
	if err != nil {
		return err
	}
	for _, f := range files {
		if _, err := fmt.Fprintf(stdout, "%s\t%s%s\n", f.Path, f.Source, f.Constants); err != nil {
			return err
		}
	}
	return nil
}
