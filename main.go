package main

import (
	"fmt"
	"os"

	"petal/internal/cli"
)

func main() {
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
