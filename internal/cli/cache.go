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

	"petal/internal/manage"
	"petal/internal/prefixdisk"
)

// gigabyte is the unit of --prefix-cache-gb, as disks are sold.
const gigabyte = 1e9

// autoBudget is --prefix-cache-gb's word for prefixdisk.DefaultBudget
// (the settings' manage.AutoPrefixCacheGB).
const autoBudget = "auto"

func init() {
	commands["cache"] = command{
		summary: "list or clear the prefix cache's snapshots on disk (petal cache list|clear)",
		run:     runCache,
	}
}

// prefixDiskFlags adds the disk tier's flags to a command's; serveSettings
// reads them when given, and the saved settings apply where they are not.
func prefixDiskFlags(fs *flag.FlagSet) {
	fs.String("prefix-cache-dir", "", "folder of the prefix cache's snapshots on disk, which outlive a restart (default: the saved settings', else "+defaultDirWords()+")")
	fs.String("prefix-cache-gb", "", "disk the prefix cache's snapshots may take, in GB ('auto': 10% of the free disk, at most 20; 0 turns the disk tier off; default: the saved settings', else auto)")
}

// defaultDirWords names the disk tier's default folder for the help.
func defaultDirWords() string {
	if d := prefixdisk.DefaultDir(); d != "" {
		return d
	}
	return "none here"
}

// parsePrefixCacheGB reads --prefix-cache-gb: autoBudget, or GB from 0 to
// manage.MaxPrefixCacheGB, as manage.Settings holds them.
func parsePrefixCacheGB(gb string) (float64, error) {
	if gb == autoBudget {
		return manage.AutoPrefixCacheGB, nil
	}
	v, err := strconv.ParseFloat(gb, 64)
	if err != nil || !(v >= 0 && v <= manage.MaxPrefixCacheGB) {
		return 0, fmt.Errorf("--prefix-cache-gb %q: want %q or a number of GB from 0 to %g", gb, autoBudget, float64(manage.MaxPrefixCacheGB))
	}
	return v, nil
}

// openPrefixDisk opens the disk tier in dir ("" for the default folder)
// with a budget of gb (manage.AutoPrefixCacheGB for the default one); nil
// when gb is 0 or there is no folder. The note says what it holds, for
// the start-up lines.
func openPrefixDisk(dir string, gb float64, logf prefixdisk.Logf) (*prefixdisk.Store, string, error) {
	if gb == 0 {
		return nil, "prefix cache on disk: off", nil
	}
	if dir == "" {
		dir = prefixdisk.DefaultDir()
	}
	if dir == "" {
		return nil, "prefix cache on disk: off (no cache folder here; name one with --prefix-cache-dir)", nil
	}
	budget := int64(gb * gigabyte)
	if gb == manage.AutoPrefixCacheGB {
		budget = prefixdisk.DefaultBudget(dir)
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
	dir := fs.String("dir", "", "the prefix cache's folder (serve's --prefix-cache-dir; default: the saved settings' prefix_cache_dir, else "+defaultDirWords()+")")
	settingsFile := fs.String("settings", "", "the settings file whose prefix_cache_dir is the default folder (default: petal/settings.json in the user's config folder)")
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
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "dir" })
	if !given {
		d, err := savedPrefixDir(*settingsFile)
		if err != nil {
			return err
		}
		*dir = d
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

// savedPrefixDir is the folder petal serve uses without --prefix-cache-dir:
// the settings file's prefix_cache_dir (the user's file when path is ""),
// else the default folder.
func savedPrefixDir(path string) (string, error) {
	if path == "" {
		p, err := manage.DefaultSettingsPath()
		if err != nil {
			return prefixdisk.DefaultDir(), nil
		}
		path = p
	}
	st, err := manage.OpenSettings(path)
	if err != nil {
		return "", err
	}
	if d := st.Get().PrefixCacheDir; d != "" {
		return d, nil
	}
	return prefixdisk.DefaultDir(), nil
}
