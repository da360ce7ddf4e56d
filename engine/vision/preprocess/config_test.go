package preprocess

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// qwen36Processor is Qwen/Qwen3.6-35B-A3B's preprocessor_config.json.
const qwen36Processor = `{
  "size": {"longest_edge": 16777216, "shortest_edge": 65536},
  "patch_size": 16,
  "temporal_patch_size": 2,
  "merge_size": 2,
  "image_mean": [0.5, 0.5, 0.5],
  "image_std": [0.5, 0.5, 0.5],
  "processor_class": "Qwen3VLProcessor",
  "image_processor_type": "Qwen2VLImageProcessorFast"
}`

func modelDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoadConfig: each place a model folder keeps the processor's values.
func TestLoadConfig(t *testing.T) {
	withMax := func(c Config, lo, hi int) Config { c.MinPixels, c.MaxPixels = lo, hi; return c }
	patch14 := DefaultConfig()
	patch14.PatchSize = 14
	cases := []struct {
		name  string
		files map[string]string
		want  Config
	}{
		{"Qwen3.6's file", map[string]string{ConfigFile: qwen36Processor}, DefaultConfig()},
		{"no file", nil, DefaultConfig()},
		{"min_pixels and max_pixels override size", map[string]string{ConfigFile: `{"size": {"shortest_edge": 1, "longest_edge": 2}, "min_pixels": 4096, "max_pixels": 1048576}`},
			withMax(DefaultConfig(), 4096, 1048576)},
		{"processor_config.json's image_processor", map[string]string{processorFile: `{"image_processor": {"size": {"shortest_edge": 1024, "longest_edge": 262144}}}`},
			withMax(DefaultConfig(), 1024, 262144)},
		{"vision_config alone", map[string]string{modelConfigFile: `{"vision_config": {"patch_size": 14, "spatial_merge_size": 2}}`}, patch14},
		{"vision_config agreeing", map[string]string{modelConfigFile: `{"vision_config": {"patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2}}`, ConfigFile: qwen36Processor}, DefaultConfig()},
		{"a text-only config.json", map[string]string{modelConfigFile: `{"text_config": {}}`}, DefaultConfig()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := LoadConfig(modelDir(t, c.files))
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("%+v, want %+v", got, c.want)
			}
		})
	}
}

// TestLoadConfigRefuses: values the processor or the tower could not work
// with are refused, naming what is wrong.
func TestLoadConfigRefuses(t *testing.T) {
	for _, c := range []struct {
		name, file, text, want string
	}{
		{"geometry against vision_config", ConfigFile, `{"patch_size": 14}`, "vision_config"},
		{"patch_size 0", ConfigFile, `{"patch_size": 0}`, "patch_size"},
		{"two means", ConfigFile, `{"image_mean": [0.5, 0.5]}`, "image_mean"},
		{"std 0", ConfigFile, `{"image_std": [0.5, 0, 0.5]}`, "image_std"},
		{"max_pixels under one block", ConfigFile, `{"max_pixels": 100}`, "size"},
		{"min over max", ConfigFile, `{"size": {"shortest_edge": 70000, "longest_edge": 65536}}`, "size"},
		{"rescale_factor 0", ConfigFile, `{"rescale_factor": 0}`, "rescale_factor"},
		{"not JSON", ConfigFile, `{"size": `, ConfigFile},
		{"processor_config.json not JSON", processorFile, `[`, processorFile},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{c.file: c.text}
			if c.want == "vision_config" {
				files[modelConfigFile] = `{"vision_config": {"patch_size": 16}}`
			}
			_, err := LoadConfig(modelDir(t, files))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}
