package main

import (
	"fmt"
	"log"
	"os"

	"petal/internal/cli"
)

func main() {
	// Lines packages log on their own (the demo model's copy mended, for
	// one) read as the servers' logs do.
	log.SetPrefix("petal: ")
	args := os.Args[1:]
	var err error
	if len(args) == 0 && runDesktop != nil {
		err = runDesktop()
	} else {
		err = cli.Run(args, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "petal:", err)
		os.Exit(1)
	}
}
