package manage

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/engine/chattemplate"
	"petal/engine/checkpoint"
	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/tokenizer"
)

// folderDownloader is a finished download of one folder.
type folderDownloader struct {
	recordingDownloader
	dir string
}

func (d *folderDownloader) Status() DownloadStatus {
	s := d.recordingDownloader.Status()
	s.Dir = d.dir
	return s
}

// TestLoadRefusalCodes shows each refusal of a load reaching the UI with
// its code and message, and a load that succeeds answering the new status.
func TestLoadRefusalCodes(t *testing.T) {
	var loadErr error
	served := "demo"
	f := newFixture(t, func(o *Options) {
		o.Model = func() ModelStatus { return ModelStatus{Name: served, State: StateReady} }
		o.Load = func(context.Context) error {
			if loadErr == nil {
				served = "Qwen3.6-35B-A3B-4bit"
			}
			return loadErr
		}
	})
	for _, tc := range []struct {
		err  error
		code string
	}{
		{fmt.Errorf("%w: Qwen3.6-35B-A3B does not fit (verdict \"no\")", ErrDoesNotFit), "does_not_fit"},
		{fmt.Errorf("%w: the download is idle", ErrNotDownloaded), "not_downloaded"},
		{ErrLoadBusy, "load_busy"},
		{fmt.Errorf("tokenizer.json: no such file"), "load_failed"},
	} {
		loadErr = tc.err
		r := f.do(t, "POST", "/manage/model/load", "{}", nil)
		msg, _ := r.body["error"].(map[string]any)["message"].(string)
		if r.status != 409 || errCode(r) != tc.code || msg != tc.err.Error() {
			t.Errorf("%v: %d %q %q, want 409 %q", tc.err, r.status, errCode(r), msg, tc.code)
		}
	}
	loadErr = nil
	r := f.do(t, "POST", "/manage/model/load", "{}", nil)
	if m, _ := r.body["model"].(map[string]any); r.status != 200 || m["name"] != "Qwen3.6-35B-A3B-4bit" || r.body["load"] != true {
		t.Errorf("a load that succeeded answered %d %v", r.status, r.body)
	}
}

// TestDeleteServedModelRefused shows the download being served cannot be
// deleted, and can once another model serves.
func TestDeleteServedModelRefused(t *testing.T) {
	dl := &folderDownloader{recordingDownloader{state: DownloadDone}, "/models/Qwen"}
	served := dl.dir
	f := newFixture(t, func(o *Options) {
		o.Model = func() ModelStatus { return ModelStatus{Name: "Qwen", State: StateReady, Dir: served} }
		o.Downloader = dl
	})
	if r := f.do(t, "POST", "/manage/download/delete", "{}", nil); r.status != 409 || errCode(r) != "model_in_use" {
		t.Errorf("deleting the served model: %d %q", r.status, errCode(r))
	}
	if len(dl.actions) != 0 {
		t.Fatalf("the downloader was asked to %v", dl.actions)
	}
	served = "/cache/demo"
	if r := f.do(t, "POST", "/manage/download/delete", "{}", nil); r.status != 200 || r.body["state"] != DownloadIdle {
		t.Errorf("deleting a model not served: %d %v", r.status, r.body)
	}
}

// TestDamagedModelSaysDownloadAgain loads folders with one file damaged
// the way a broken download leaves it, through the readers a load uses,
// and expects the one re-download code for each, with the cause in the
// log and not in the reply.
func TestDamagedModelSaysDownloadAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(dir string) error
		open   func(dir string) error
	}{
		{"truncated shard", func(dir string) error {
			return os.Truncate(filepath.Join(dir, "model-00002-of-00002.safetensors"), 100)
		}, func(dir string) error { _, err := checkpoint.Open(dir); return err }},
		{"config cut short", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"text_config": {"hidden_size": 6`), 0o644)
		}, func(dir string) error { _, err := checkpoint.Open(dir); return err }},
		{"tokenizer cut short", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": {"type": "BPE", "vocab": {"a"`), 0o644)
		}, func(dir string) error { _, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json")); return err }},
		{"template that does not parse", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, chattemplate.TemplateFile), []byte("{% for m in messages %}{{ m.content"), 0o644)
		}, func(dir string) error { _, err := chattemplate.Load(dir); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := checkpointtest.Write(dir, checkpointtest.Tiny()); err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(dir); err != nil {
				t.Fatal(err)
			}
			var logged strings.Builder
			f := newFixture(t, func(o *Options) {
				o.Load = func(context.Context) error { return fmt.Errorf("loading %s: %w", dir, tc.open(dir)) }
				o.Logger = log.New(&logged, "", 0)
			})
			r := f.do(t, "POST", "/manage/model/load", "{}", nil)
			msg, _ := r.body["error"].(map[string]any)["message"].(string)
			if r.status != 409 || errCode(r) != CodeDamaged || msg != damagedMessage {
				t.Errorf("%d %q %q, want 409 %q %q", r.status, errCode(r), msg, CodeDamaged, damagedMessage)
			}
			if !strings.Contains(logged.String(), dir) {
				t.Errorf("the log %q does not hold the cause", logged.String())
			}
		})
	}
}
