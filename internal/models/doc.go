// Package models decides which model Petal runs when none is named: the
// installed Qwen3.6-35B-A3B if there is one, else the demo model built into
// the binary (package petal/models/demo), so that a fresh machine answers
// at once.
//
// # Where models live
//
// Installed models are folders under [Root], where petal pull puts them
// (hub.ModelsRoot: $PETAL_MODELS, else the XDG data folder's
// petal/models). The real model is the folder [RealModelName] there.
//
// The demo model is embedded in the binary, but the engine maps weights
// from files, so [DemoDir] unpacks it once into the user's cache folder,
// under a name that carries a hash of its contents: a binary with another
// demo model unpacks its own, and a folder that exists is complete,
// because it is renamed into place only after every file is written. What
// happens to it later (a cache cleaner, a disk error, a hand) is checked at
// each start: every file is compared with the embedded one by SHA-256, and
// one that is damaged or missing is unpacked again, with a line on the
// standard logger.
package models
