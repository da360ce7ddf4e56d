// Command tensormanifest writes the pinned manifest of per-tensor sha256
// hashes that `petal pull` checks the tensors it fetches by range requests
// against (the MTP head of the original Qwen3.6 checkpoint, later its
// vision tower): the Hub's own hashes cover whole files only. A maintainer
// with network access to the Hub runs it once, from the real files, and
// commits its output under internal/hub/pinned (see the README there for
// the format):
//
//	go run ./tools/tensormanifest -repo Qwen/Qwen3.6-35B-A3B -revision main -filter mtp \
//	    -out internal/hub/pinned/Qwen--Qwen3.6-35B-A3B.mtp.json
//
// It resolves the revision to a commit, reads the repository's
// model.safetensors.index.json and each needed shard's header, fetches
// the tensors' bytes with the same code a pull uses, and hashes them. The
// fetch is kept in a folder under -work until it is done, so an
// interrupted run resumes. HF_ENDPOINT and HF_TOKEN apply as to a pull.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"petal/internal/hub"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tensormanifest:", err)
		os.Exit(1)
	}
}

func run() error {
	repo := flag.String("repo", hub.MTPSourceRepo, "repository to pin")
	revision := flag.String("revision", "main", "revision (resolved to the commit the manifest pins)")
	filter := flag.String("filter", hub.MTPTensors.Name, "which tensors: mtp or vision")
	out := flag.String("out", "", "file to write (default: internal/hub/pinned/OWNER--NAME.FILTER.json)")
	work := flag.String("work", os.TempDir(), "folder for the fetch in progress")
	endpoint := flag.String("endpoint", "", "Hub URL (default: $HF_ENDPOINT, else "+hub.DefaultEndpoint+")")
	flag.Parse()
	var f hub.TensorFilter
	switch *filter {
	case hub.MTPTensors.Name:
		f = hub.MTPTensors
	case hub.VisionTensors.Name:
		f = hub.VisionTensors
	default:
		return fmt.Errorf("-filter %q: want %s or %s", *filter, hub.MTPTensors.Name, hub.VisionTensors.Name)
	}
	if *out == "" {
		*out = "internal/hub/pinned/" + hub.PinnedName(*repo, f)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	m, err := hub.MakeTensorManifest(ctx, hub.Options{Endpoint: *endpoint, Repo: *repo, Revision: *revision,
		Progress: func(ev hub.Event) {
			if ev.Retry != nil {
				fmt.Fprintln(os.Stderr, hub.Diagnose(ev.Retry).Message)
			}
		}}, f, *work)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("%d %s tensors of %s@%s pinned in %s\n", len(m.Tensors), f.Name, m.Repo, m.SHA, *out)
	return nil
}
