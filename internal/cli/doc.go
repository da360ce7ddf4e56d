// Package cli is the petal command's subcommands, each in a <name>.go file
// that registers itself in the commands table from init; [Run] runs one.
//
// # Subcommands
//
// `petal help` lists them with their summaries. serve and chat are the
// ways to talk to the model (over HTTP, in the terminal); pull and fit
// prepare a machine (download, memory check); tokenize, render, generate,
// logits and bench expose one layer of the engine each, so that it can be
// compared with the reference implementation from a script.
//
// # Loading a model
//
// Package petal/engine/backend opens a model on a backend (cpu, sim,
// metal or cuda). petal serve, petal chat and the desktop app load through the
// memory-fit check of package petal/internal/fit, which refuses a model
// that does not fit and lowers a context that does not, before a device
// opens; which model runs when none is named is package
// petal/internal/models' choice. petal serve and the desktop app are each
// a few lines over package petal/internal/runtime, which also loads the
// model the Setup screen downloaded while they run: through the same
// check, beside the served model, whose service is then swapped in a
// service.Slot, so that running requests finish on the old model before
// it closes.
package cli
