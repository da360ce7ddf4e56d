package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/internal/hub"
	"petal/internal/hub/hubtest"
	"petal/internal/models"
	"petal/internal/service/servicetest"
)

// TestStatusDemoAndThinks: /manage/status did not say whether the model
// is the demo, nor whether it thinks, so the chat window guessed from the
// display name and ticked "Think" for the demo, which never thinks (issue
// 28 B.2). The test model's template (the real model's) opens a think
// block; the demo's closes it at once.
func TestStatusDemoAndThinks(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // where the demo is unpacked
	t.Setenv(hub.EnvModels, t.TempDir())
	demo, err := models.DemoDir()
	if err != nil {
		t.Fatal(err)
	}
	fixture := servicetest.FixtureFolder(t, "tiny-a")
	// A model of its own whose template, like the demo's, always closes
	// the think block: the template decides, not the name.
	closed := servicetest.FixtureFolder(t, "tiny-a")
	tmpl := filepath.Join(closed, "chat_template.jinja")
	text, err := os.ReadFile(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	open := `{{- '<think>\n' }}`
	if !strings.Contains(string(text), open) {
		t.Fatalf("%s opens no think block as %s", tmpl, open)
	}
	if err := os.WriteFile(tmpl, []byte(strings.ReplaceAll(string(text), open, `{{- '<think>\n\n</think>\n\n' }}`)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name         string
		dir          string
		demo, thinks bool
	}{
		{"the demo", demo, true, false},
		{"a model that thinks", fixture, false, true},
		{"a model that never thinks", closed, false, false},
	} {
		s := startRuntime(t, setupPull(t, hubtest.New(t, fixture)), LoadRequest{Dir: c.dir, Backend: "cpu", Context: 4096})
		var st struct {
			Model struct {
				DisplayName  string `json:"display_name"`
				Demo, Thinks *bool
			}
		}
		s.call(t, "GET", "/manage/status", "", &st)
		if st.Model.Demo == nil || st.Model.Thinks == nil {
			t.Fatalf("%s: /manage/status lacks demo or thinks: %+v", c.name, st.Model)
		}
		if *st.Model.Demo != c.demo || *st.Model.Thinks != c.thinks {
			t.Errorf("%s (%s): demo %v thinks %v, want %v and %v", c.name, st.Model.DisplayName, *st.Model.Demo, *st.Model.Thinks, c.demo, c.thinks)
		}
		s.stop()
	}
}
