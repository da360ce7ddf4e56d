package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"petal/internal/prefixdisk"
)

// gigabyte is the unit of --prefix-cache-gb, as disks are sold.
const gigabyte = 1e9

// autoBudget is --prefix-cache-gb's default: prefixdisk.DefaultBudget.
const autoBudget = "auto"

// maxPrefixCacheGB bounds --prefix-cache-gb, far past any disk, so that a
// typo cannot overflow the byte count.
const maxPrefixCacheGB = 1e6

func init() {
	commands["cache"] = command{
		summary: "list or clear the prefix cache's snapshots on disk (petal cache list|clear)",
		run:     runCache,
	}
}

// prefixDiskFlags adds the disk tier's flags to a command's.
func prefixDiskFlags(fs *flag.FlagSet) (dir, gb *string) {
	dir = fs.String("prefix-cache-dir", prefixdisk.DefaultDir(), "folder of the prefix cache's snapshots on disk, which outlive a restart")
	gb = fs.String("prefix-cache-gb", autoBudget, "disk the prefix cache's snapshots may take, in GB ('auto': 10% of the free disk, at most 20; 0 turns the disk tier off)")
	return dir, gb
}

// openPrefixDisk opens the disk tier as the flags say; nil when they turn
// it off. The note says what it holds, for the start-up lines.
func openPrefixDisk(dir, gb string, logf prefixdisk.Logf) (*prefixdisk.Store, string, error) {
	if dir == "" {
		return nil, "prefix cache on disk: off (no cache folder here; name one with --prefix-cache-dir)", nil
	}
	var budget int64
	if gb == autoBudget {
		budget = prefixdisk.DefaultBudget(dir)
	} else {
		v, err := strconv.ParseFloat(gb, 64)
		if err != nil || !(v >= 0 && v <= maxPrefixCacheGB) {
			return nil, "", fmt.Errorf("--prefix-cache-gb %q: want %q or a number of GB from 0", gb, autoBudget)
		}
		budget = int64(v * gigabyte)
	}
	if budget <= 0 {
		return nil, "prefix cache on disk: off", nil
	}
	s, err := prefixdisk.Open(dir, budget, logf)
	if err != nil {
		return nil, "", err
	}
	files, bytes := s.Usage()
	return s, fmt.Sprintf("prefix cache on disk: %s, %.1f of %.1f GB in %d snapshots", dir, float64(bytes)/gigabyte, float64(budget)/gigabyte, files), nil
}

func runCache(args []string, stdout io.Writer) error {
	fs := newFlags("cache", os.Stderr)
	dir := fs.String("dir", prefixdisk.DefaultDir(), "the prefix cache's folder (serve's --prefix-cache-dir)")
	if len(args) == 0 || (args[0] != "list" && args[0] != "clear") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fs.Usage()
			return flag.ErrHelp
		}
		return errors.New("petal cache takes list or clear (petal cache list [--dir DIR])")
	}
	action := args[0]
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("no cache folder here: name the prefix cache's with --dir")
	}
	if action == "clear" {
		files, bytes, err := prefixdisk.Clear(*dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %d snapshots (%.2f GB) from %s\n", files, float64(bytes)/gigabyte, *dir)
		return nil
	}
	entries, err := prefixdisk.List(*dir)
	if err != nil {
		return err
	}
	var total int64
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(entries) > 0 {
		fmt.Fprintln(tw, "model\ttokens\tMB\tlast used\t")
	}
	for _, e := range entries {
		total += e.Bytes
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t\n", e.Model, e.Tokens, float64(e.Bytes)/1e6, e.Used.Local().Format(time.DateTime))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d snapshots, %.2f GB in %s\n", len(entries), float64(total)/gigabyte, *dir)
	return nil
}
