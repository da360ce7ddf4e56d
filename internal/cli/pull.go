package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"petal/internal/hub"
)

func init() {
	commands["pull"] = command{
		summary: "download the model from the Hugging Face Hub (resumable, every file hashed, shards stored aligned), or --import a folder",
		run:     runPull,
	}
}

// pullBase is what every petal pull starts from: the defaults (tests give
// it a transport whose connections fail).
var pullBase = hub.Options{}

// barWidth is the progress bar's length in characters.
const barWidth = 30

func runPull(args []string, stdout io.Writer) error {
	fs := newFlags("pull", os.Stderr)
	endpoint := fs.String("endpoint", "", "Hub URL (default: $HF_ENDPOINT, else "+hub.DefaultEndpoint+")")
	repo := fs.String("repo", hub.DefaultRepo, "repository")
	revision := fs.String("revision", hub.DefaultRevision, "revision (a commit id pins the files)")
	dir := fs.String("dir", "", "model folder (default: the repository's name under $PETAL_MODELS, else the XDG data folder's petal/models)")
	noCache := fs.Bool("no-hf-cache", false, "do not import from the Hugging Face cache")
	parallel := fs.Int("parallel", hub.DefaultParallel, "connections at once")
	noMTP := fs.Bool("no-mtp", false, "do not fetch the multi-token-prediction head from the original checkpoint after the model")
	imp := fs.String("import", "", "store an existing folder (a Hugging Face cache snapshot, a downloaded or converted checkpoint) as an aligned model folder instead of downloading")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *imp != "" {
		var other []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "import" && f.Name != "dir" {
				other = append(other, "--"+f.Name)
			}
		})
		if len(other) > 0 {
			return fmt.Errorf("--import takes only --dir, not %s", strings.Join(other, " "))
		}
		return runImport(*imp, *dir, stdout)
	}
	if *parallel < 1 || *parallel > hub.MaxParallel {
		return fmt.Errorf("--parallel must be 1..%d", hub.MaxParallel)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt)
	defer signal.Stop(interrupt)
	go func() {
		if _, ok := <-interrupt; ok {
			cancel(hub.ErrPaused)
		}
	}()
	bar := &progressBar{w: os.Stderr}
	o := pullBase
	o.Endpoint, o.Repo, o.Revision, o.Dir = *endpoint, *repo, *revision, *dir
	o.NoHFCache, o.Parallel, o.Progress, o.NoMTP = *noCache, *parallel, bar.show, *noMTP
	// Offline, the listing gives up after one quiet retry: a person at a
	// terminal would otherwise wait minutes to read what the first
	// second showed.
	o.QuickOffline = true
	out, err := hub.Pull(ctx, o)
	bar.end()
	if errors.Is(err, hub.ErrPaused) {
		return errors.New("pull paused: run the same command again to resume where it stopped")
	}
	if errors.Is(err, hub.ErrUnreachable) {
		// One sentence in words, not the chain of Go errors behind it.
		return errors.New(hub.Diagnose(err).Message + " Run the same command again once the Hub can be reached.")
	}
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s@%s is in %s\n", *repo, *revision, out); err != nil {
		return err
	}
	// Said after the pull, not before: an offline pull's one line stays
	// the only one.
	if notice := hub.MTPNotice(o); notice != "" {
		fmt.Fprintln(os.Stderr, notice)
	}
	return nil
}

// runImport stores the folder src as a model folder under dir.
func runImport(src, dir string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	bar := &progressBar{w: os.Stderr}
	rep, err := hub.Import(ctx, hub.ImportOptions{Src: src, Dir: dir, Progress: bar.show})
	bar.end()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s is in %s: %d files, %d shards realigned, %d hashes checked against the Hugging Face cache's names (the others recorded for verify)\n",
		src, rep.Dir, rep.Files, rep.Realigned, rep.Checked)
	return err
}

// progressBar draws pull events on one terminal line.
type progressBar struct {
	w     io.Writer
	drawn bool
}

func (b *progressBar) show(ev hub.Event) {
	if ev.Retry != nil {
		// A retry gets a line of its own that stays, so an offline machine
		// reads why at once and each attempt's time, not a bar at 0%.
		fmt.Fprintf(b.w, "\r\x1b[K%s\n", renderRetry(ev, time.Now()))
		b.drawn = false
		return
	}
	if ev.Phase == hub.ListingFiles && ev.Total == 0 {
		// Nothing to measure yet: a bar at 0 of 0 GB would be the one
		// line an offline pull leaves above its error.
		return
	}
	fmt.Fprintf(b.w, "\r%s\x1b[K", renderProgress(ev))
	b.drawn = true
}

// renderRetry says why a connection is retried, in words, when the next
// attempt starts (as of now) and the error behind the words.
func renderRetry(ev hub.Event, now time.Time) string {
	d := hub.Diagnose(ev.Retry)
	line := d.Message
	if !ev.RetryAt.IsZero() {
		line += fmt.Sprintf(" Trying again at %s (in %s; attempt %d of %d).",
			ev.RetryAt.Format("15:04:05"), max(0, ev.RetryAt.Sub(now)).Round(time.Second), ev.Attempt, ev.MaxAttempts)
	}
	return line + " [" + d.Detail + "]"
}

func (b *progressBar) end() {
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}

// renderProgress is one line for an event: phase, bar, sizes in GB
// (10^9 bytes, as download sizes are quoted), speed and time left.
func renderProgress(ev hub.Event) string {
	frac := 0.0
	if ev.Total > 0 {
		frac = min(1, float64(ev.Done)/float64(ev.Total))
	}
	filled := int(frac * barWidth)
	line := fmt.Sprintf("%-11s [%s%s] %5.1f%% %.2f/%.2f GB", ev.Phase,
		strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled), 100*frac,
		float64(ev.Done)/1e9, float64(ev.Total)/1e9)
	if ev.BytesPerSecond > 0 {
		line += fmt.Sprintf(" %.1f MB/s", ev.BytesPerSecond/1e6)
	}
	if ev.ETA > 0 {
		line += " ETA " + ev.ETA.Round(time.Second).String()
	}
	if ev.File != "" {
		line += " " + ev.File
	}
	return line
}
