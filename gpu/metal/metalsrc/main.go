// Command metalsrc writes each kernel source as the Metal driver is given
// it (petal/shaders' files with their includes expanded) into a folder,
// with the sha256 the driver checks a bundled library against:
// scripts/macapp.sh compiles them with Apple's offline compiler into the
// libraries Petal.app carries (petal/gpu/metal's library.go).
//
//	go run ./gpu/metal/metalsrc -out DIR
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"petal/gpu/metal"
	"petal/shaders"
)

func main() {
	out := flag.String("out", "", "the folder to write NAME.metal and NAME.metal.sha256 into (required)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "metalsrc:", err)
		os.Exit(1)
	}
}

// write puts every kernel source and its hash file into dir.
func write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range shaders.Names() {
		text, err := shaders.Source(name)
		if err != nil {
			return err
		}
		_, sum := metal.LibraryFiles(name)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, sum), []byte(metal.SourceSum(text)+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
