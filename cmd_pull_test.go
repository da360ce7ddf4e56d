package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"petal/internal/hub"
)

func TestRenderProgress(t *testing.T) {
	line := renderProgress(hub.Event{
		Phase: hub.Downloading, Done: 9_700_000_000, Total: 19_400_000_000,
		BytesPerSecond: 52_300_000, ETA: 185*time.Second + 400*time.Millisecond,
		Retry: errors.New("connection reset"),
	})
	for _, want := range []string{"downloading", "[" + strings.Repeat("#", 15) + strings.Repeat(".", 15) + "]", " 50.0%", "9.70/19.40 GB", "52.3 MB/s", "ETA 3m5s", "retrying: connection reset"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	if line := renderProgress(hub.Event{Phase: hub.ListingFiles}); !strings.Contains(line, "0.0%") {
		t.Errorf("empty progress %q", line)
	}
}

func TestPullRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"pull", "--repo", "../etc"},
		{"pull", "--endpoint", "ftp://mirror"},
		{"pull", "--parallel", "0"},
		{"pull", "stray"},
	} {
		var out bytes.Buffer
		if err := dispatch(args, &out); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
