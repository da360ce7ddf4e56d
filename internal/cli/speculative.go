package cli

import (
	"flag"
	"fmt"

	"petal/engine/spec"
)

// speculativeFlag adds --speculative to fs with the default def.
func speculativeFlag(fs *flag.FlagSet, def spec.Mode) *string {
	return fs.String("speculative", def.String(), "decode with the model's MTP draft head: 'auto' drafts while it pays, 'off' never, 'on' at every step (a model without the head decodes as with 'off')")
}

// parseSpeculative reads --speculative.
func parseSpeculative(v string) (spec.Mode, error) {
	m, ok := spec.ParseMode(v)
	if !ok {
		return spec.Off, fmt.Errorf("--speculative %q: want auto, off or on", v)
	}
	return m, nil
}
