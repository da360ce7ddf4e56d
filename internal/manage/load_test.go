package manage

import (
	"context"
	"fmt"
	"testing"
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
