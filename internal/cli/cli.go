package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
)

// command is one subcommand: it parses its own flags from args and writes
// its result to stdout.
type command struct {
	summary string
	run     func(args []string, stdout io.Writer) error
}

// commands is the table of subcommands; each lives in a <name>.go file
// that registers itself here from init.
var commands = map[string]command{}

// Run runs the subcommand args[0] with the flags after it, writing its
// result to stdout; no arguments, or help, print the usage, and "help
// COMMAND" the command's own usage and flags.
func Run(args []string, stdout io.Writer) error {
	if len(args) > 1 && args[0] == "help" {
		if len(args) > 2 {
			return fmt.Errorf("help takes one command, not %q", args[1:])
		}
		args = []string{args[1], "-h"}
	}
	if len(args) == 0 || isHelp(args[0]) {
		usage(stdout)
		return nil
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = []string{"version"}
	}
	c, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("unknown command %q (run 'petal help')", args[0])
	}
	err := c.run(args[1:], stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the usage asked for is printed
	}
	return err
}

// isHelp reports whether arg asks for the general usage.
func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "-help" || arg == "--help"
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: petal <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'petal help <command>' (or 'petal <command> -h') for a command's flags.")
}
