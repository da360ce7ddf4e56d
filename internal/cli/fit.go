package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"slices"

	"petal/engine/backend"
	"petal/internal/fit"
)

func init() {
	commands["fit"] = command{
		summary: "whether the model fits the memory this machine gives it (or a simulated Mac's), and at which context",
		run:     runFit,
	}
}

func runFit(args []string, stdout io.Writer) error {
	fs := newFlags("fit", os.Stderr)
	memGB := fs.Float64("memory-gb", 0, "simulate an Apple silicon Mac of this memory size, as Apple names it (32 for a 32 GB Mac); default: this machine")
	context := fs.Int("context", fit.DefaultContext, "context length to check, in tokens")
	sessions := fs.Int("cached-sessions", fit.DefaultCachedSessions, "sessions kept besides the generating one")
	dir := fs.String("model", "", "checkpoint folder to size (default: the Qwen3.6-35B-A3B shape)")
	asJSON := fs.Bool("json", false, "print the report as JSON (sizes in bytes)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	m, err := fitModel(*dir)
	if err != nil {
		return err
	}
	var budget fit.Budget
	if *memGB != 0 {
		budget, err = fit.SimulatedMac(*memGB)
	} else {
		budget, err = machineBudget()
	}
	if err != nil {
		return err
	}
	r, err := fit.Check(m, budget, fit.Request{Context: *context, CachedSessions: *sessions})
	if err != nil {
		return err
	}
	guidance, err := fit.Guidance(m, r)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(struct {
			fit.Report
			Guidance string `json:"guidance"`
		}{r, guidance})
	} else {
		err = printFit(stdout, r, guidance)
	}
	if err == nil && r.Verdict == fit.No {
		// A script asking whether the model runs here reads the status.
		return errDoesNotFit
	}
	return err
}

// errDoesNotFit is petal fit's failure when the verdict is no: the report
// above it says why.
var errDoesNotFit = errors.New("the model does not fit (verdict no): see the report above")

// machineBudget is this machine's budget: on a Mac, the working set its
// Metal device recommends; elsewhere, the memory the OS reports available.
func machineBudget() (fit.Budget, error) {
	if goruntime.GOOS != "darwin" {
		return fit.Host()
	}
	dev, _, err := backend.OpenDevice("metal")
	if err != nil {
		return fit.Budget{}, fmt.Errorf("%w: %w", fit.ErrNoBudget, err)
	}
	defer dev.Close()
	return fit.Device(dev.Info())
}

func fitModel(dir string) (fit.Model, error) {
	if dir == "" {
		return fit.Qwen36()
	}
	return fit.FromCheckpoint(dir)
}

func printFit(w io.Writer, r fit.Report, guidance string) error {
	fmt.Fprintf(w, "%s: %s\n", r.Model, r.Advice)
	fmt.Fprintf(w, "budget: %s (%s)\n", fit.FormatBytes(r.WorkingSetBytes), r.WorkingSetSource)
	if r.MaxContext > 0 {
		fmt.Fprintf(w, "largest context that fits: %d tokens\n\n", r.MaxContext)
	} else {
		fmt.Fprintf(w, "no context fits\n\n")
	}
	rows := []fitRow{
		{"weights", r.WeightsBytes},
		{"copies of misaligned weights (`petal pull --import DIR` stores them aligned)", r.MisalignedCopyBytes},
		{"float32 copies of the model's vectors", r.ModelVectorBytes},
		{fmt.Sprintf("KV cache for %d positions (%s, %d bytes a token) and attention scratch", r.KVCapacity, r.KVDType, r.KVBytesPerToken), r.KVBytes},
		{"prompt chunk activations, or the KV cache's growth (the larger)", max(r.PrefillScratchBytes, r.KVGrowBytes)},
		{fmt.Sprintf("DeltaNet state, %d sessions", r.Sessions), int64(r.Sessions) * r.SessionStateBytes},
		{fmt.Sprintf("step scratch, %d sessions", r.Sessions), int64(r.Sessions) * r.SessionScratchBytes},
		{"drafting with the MTP head: DeltaNet states kept for the rewind, the head's KV cache", r.DraftBytes},
		{"runtime margin", r.OverheadBytes},
	}
	// A term the model does not have is left out, not listed as nothing.
	rows = slices.DeleteFunc(rows, func(row fitRow) bool { return row.n == 0 })
	rows = append(rows, fitRow{fmt.Sprintf("total at %d tokens", r.Context), r.TotalBytes})
	width := 0
	for _, row := range rows {
		width = max(width, len(row.what))
	}
	for _, row := range rows {
		fmt.Fprintf(w, "  %-*s %10s\n", width, row.what, fit.FormatBytes(row.n))
	}
	if guidance == "" {
		return nil
	}
	_, err := fmt.Fprintf(w, "\n%s\n", guidance)
	return err
}

// fitRow is one term of the memory sum as petal fit lists it.
type fitRow struct {
	what string
	n    int64
}
