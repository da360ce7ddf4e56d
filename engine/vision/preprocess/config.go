package preprocess

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Qwen3.6's processor values (Qwen/Qwen3.6-35B-A3B preprocessor_config.json,
// the same as Qwen3.5's and Qwen3-VL's): size {shortest_edge 65536,
// longest_edge 16777216}, patch_size 16, temporal_patch_size 2, merge_size
// 2, image_mean and image_std 0.5, rescale_factor 1/255, resample 3
// (bicubic).
const (
	DefaultMinPixels         = 65536    // 256²
	DefaultMaxPixels         = 16777216 // 4096²
	DefaultPatchSize         = 16
	DefaultTemporalPatchSize = 2
	DefaultMergeSize         = 2
)

// configMaxPatch bounds patch_size, temporal_patch_size and merge_size read
// from a file, so a bad file cannot make a patch row absurdly long.
const configMaxPatch = 64

// Config is what the processor takes from preprocessor_config.json.
type Config struct {
	MinPixels         int // size.shortest_edge (or min_pixels)
	MaxPixels         int // size.longest_edge (or max_pixels)
	PatchSize         int
	TemporalPatchSize int
	MergeSize         int
	RescaleFactor     float64
	Mean, Std         [3]float64
}

// DefaultConfig is Qwen3.6's processor configuration.
func DefaultConfig() Config {
	return Config{
		MinPixels:         DefaultMinPixels,
		MaxPixels:         DefaultMaxPixels,
		PatchSize:         DefaultPatchSize,
		TemporalPatchSize: DefaultTemporalPatchSize,
		MergeSize:         DefaultMergeSize,
		RescaleFactor:     1.0 / 255,
		Mean:              [3]float64{0.5, 0.5, 0.5},
		Std:               [3]float64{0.5, 0.5, 0.5},
	}
}

// The files a model folder may hold the processor's configuration in:
// ConfigFile as save_pretrained writes an image processor, or
// processorFile's "image_processor" object as transformers 5 writes a whole
// processor; modelConfigFile's vision_config gives the tower's patch
// geometry, which the processor's must equal.
const (
	ConfigFile      = "preprocessor_config.json"
	processorFile   = "processor_config.json"
	modelConfigFile = "config.json"
)

// LoadConfig reads the processor's configuration from a model folder over
// [DefaultConfig]: a field the files lack keeps Qwen3.6's value, and
// min_pixels and max_pixels override size as the processor's constructor
// lets them. Without a processor file the patch geometry comes from
// config.json's vision_config (patch_size, temporal_patch_size,
// spatial_merge_size); with one, the two must agree, since the tower reads
// the patches the processor lays out.
func LoadConfig(dir string) (Config, error) {
	cfg := DefaultConfig()
	tower, err := readVisionConfig(filepath.Join(dir, modelConfigFile))
	if err != nil {
		return cfg, err
	}
	if tower != nil {
		cfg.PatchSize, cfg.TemporalPatchSize, cfg.MergeSize = tower[0], tower[1], tower[2]
	}
	data, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if errors.Is(err, os.ErrNotExist) {
		data, err = readProcessorFile(filepath.Join(dir, processorFile))
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		return cfg, cfg.Validate()
	case err != nil:
		return cfg, err
	}
	if cfg, err = parseOver(cfg, data); err != nil {
		return cfg, err
	}
	if got := [3]int{cfg.PatchSize, cfg.TemporalPatchSize, cfg.MergeSize}; tower != nil && got != *tower {
		return cfg, fmt.Errorf("%s: patch_size, temporal_patch_size, merge_size %v differ from %s's vision_config %v", ConfigFile, got, modelConfigFile, *tower)
	}
	return cfg, nil
}

// readVisionConfig returns vision_config's patch geometry from config.json,
// nil if the file or the object is missing, keeping Qwen3.6's value for a
// missing field.
func readVisionConfig(path string) (*[3]int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f struct {
		Vision *struct {
			PatchSize         *int `json:"patch_size"`
			TemporalPatchSize *int `json:"temporal_patch_size"`
			MergeSize         *int `json:"spatial_merge_size"`
		} `json:"vision_config"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", modelConfigFile, err)
	}
	if f.Vision == nil {
		return nil, nil
	}
	g := [3]int{DefaultPatchSize, DefaultTemporalPatchSize, DefaultMergeSize}
	for i, v := range []*int{f.Vision.PatchSize, f.Vision.TemporalPatchSize, f.Vision.MergeSize} {
		if v != nil {
			g[i] = *v
		}
	}
	return &g, nil
}

// readProcessorFile returns processor_config.json's "image_processor"
// object, os.ErrNotExist if the file or the object is missing.
func readProcessorFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Image json.RawMessage `json:"image_processor"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", processorFile, err)
	}
	if len(f.Image) == 0 || string(f.Image) == "null" {
		return nil, fmt.Errorf("%s has no image_processor: %w", processorFile, os.ErrNotExist)
	}
	return f.Image, nil
}

// ParseConfig reads a preprocessor_config.json's contents over
// [DefaultConfig] and validates them.
func ParseConfig(data []byte) (Config, error) {
	return parseOver(DefaultConfig(), data)
}

func parseOver(cfg Config, data []byte) (Config, error) {
	var f struct {
		Size *struct {
			ShortestEdge *int `json:"shortest_edge"`
			LongestEdge  *int `json:"longest_edge"`
		} `json:"size"`
		MinPixels         *int       `json:"min_pixels"`
		MaxPixels         *int       `json:"max_pixels"`
		PatchSize         *int       `json:"patch_size"`
		TemporalPatchSize *int       `json:"temporal_patch_size"`
		MergeSize         *int       `json:"merge_size"`
		RescaleFactor     *float64   `json:"rescale_factor"`
		Mean              *[]float64 `json:"image_mean"`
		Std               *[]float64 `json:"image_std"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return cfg, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	set := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	if f.Size != nil {
		set(&cfg.MinPixels, f.Size.ShortestEdge)
		set(&cfg.MaxPixels, f.Size.LongestEdge)
	}
	set(&cfg.MinPixels, f.MinPixels)
	set(&cfg.MaxPixels, f.MaxPixels)
	set(&cfg.PatchSize, f.PatchSize)
	set(&cfg.TemporalPatchSize, f.TemporalPatchSize)
	set(&cfg.MergeSize, f.MergeSize)
	if f.RescaleFactor != nil {
		cfg.RescaleFactor = *f.RescaleFactor
	}
	for _, m := range []struct {
		dst *[3]float64
		src *[]float64
	}{{&cfg.Mean, f.Mean}, {&cfg.Std, f.Std}} {
		if m.src == nil {
			continue
		}
		if len(*m.src) != 3 {
			return cfg, fmt.Errorf("%s: image_mean and image_std need 3 values, got %d", ConfigFile, len(*m.src))
		}
		copy(m.dst[:], *m.src)
	}
	return cfg, cfg.Validate()
}

// Validate refuses values the processor could not work with.
func (c Config) Validate() error {
	for _, v := range []struct {
		name string
		v    int
	}{{"patch_size", c.PatchSize}, {"temporal_patch_size", c.TemporalPatchSize}, {"merge_size", c.MergeSize}} {
		if v.v < 1 || v.v > configMaxPatch {
			return fmt.Errorf("%s: %s %d is not in 1..%d", ConfigFile, v.name, v.v, configMaxPatch)
		}
	}
	f := c.Factor()
	if c.MinPixels < 0 || c.MaxPixels < f*f || c.MinPixels > c.MaxPixels {
		return fmt.Errorf("%s: size %d..%d pixels is not a range holding a %dx%d block", ConfigFile, c.MinPixels, c.MaxPixels, f, f)
	}
	if !(c.RescaleFactor > 0) || math.IsInf(c.RescaleFactor, 0) {
		return fmt.Errorf("%s: rescale_factor %v is not positive", ConfigFile, c.RescaleFactor)
	}
	for i, s := range c.Std {
		if !(s > 0) || math.IsInf(s, 0) || math.IsNaN(c.Mean[i]) || math.IsInf(c.Mean[i], 0) {
			return fmt.Errorf("%s: image_mean %v / image_std %v are not finite with std > 0", ConfigFile, c.Mean, c.Std)
		}
	}
	return nil
}

// Factor is the side of one merged block in pixels, patch_size·merge_size:
// every resized side is a multiple of it.
func (c Config) Factor() int { return c.PatchSize * c.MergeSize }
