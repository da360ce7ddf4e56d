package reftest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"petal/engine/vision/preprocess"
)

// Vision is a vision fixture that tools/visref writes (vision-a): its
// vision.json, the pixel values transformers' processor took for each
// image, the merged features its tower computed from them, and the logits
// at each prompt's end.
type Vision struct {
	Dir     string
	Images  []VisionImage  `json:"images"`
	Prompts []VisionPrompt `json:"prompts"`
	// PatchDim is the width of a pixel-value row, one patch.
	PatchDim int `json:"-"`
	// PromptLogits are [len(Prompts)][vocab].
	PromptLogits []float32 `json:"-"`
}

// VisionImage is one image of a vision fixture.
type VisionImage struct {
	Grid    [3]int `json:"grid"` // t, h, w in patches
	Patches int    `json:"patches"`
	Tokens  int    `json:"tokens"` // merged tokens, Patches / merge²
	// Values are the pixel values, [Patches][PatchDim].
	Values []float32 `json:"-"`
	// Features are the tower's merged features, [Tokens][the text width].
	Features []float32 `json:"-"`
}

// VisionPrompt is one prompt of a vision fixture with its images.
type VisionPrompt struct {
	Prompt    []int    `json:"prompt"`
	Images    []int    `json:"images"` // the images, by index, in the prompt's order
	Tokens    []int    `json:"tokens"` // transformers' greedy answer
	Positions [3][]int `json:"positions"`
	RopeDelta int      `json:"rope_delta"`
}

// LoadVision reads the vision fixture in dir, whose patches are patchDim
// pixel values and whose features are featureDim wide; it fails when the
// files do not hold exactly its images' values and features.
func LoadVision(dir string, patchDim, featureDim int) (*Vision, error) {
	data, err := os.ReadFile(filepath.Join(dir, "vision.json"))
	if err != nil {
		return nil, err
	}
	v := &Vision{Dir: dir, PatchDim: patchDim}
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("reftest: %s: %w", dir, err)
	}
	pixels, err := readF32(filepath.Join(dir, "pixels.f32"))
	if err != nil {
		return nil, err
	}
	feats, err := readF32(filepath.Join(dir, "features.f32"))
	if err != nil {
		return nil, err
	}
	for i := range v.Images {
		im := &v.Images[i]
		n, k := im.Patches*patchDim, im.Tokens*featureDim
		if n > len(pixels) || k > len(feats) {
			return nil, fmt.Errorf("reftest: %s: the files end before image %d", dir, i)
		}
		im.Values, im.Features = pixels[:n], feats[:k]
		pixels, feats = pixels[n:], feats[k:]
	}
	if len(pixels) != 0 || len(feats) != 0 {
		return nil, fmt.Errorf("reftest: %s: the files hold %d pixel values and %d features past %d images", dir, len(pixels), len(feats), len(v.Images))
	}
	if v.PromptLogits, err = readF32(filepath.Join(dir, "prompt_logits.f32")); err != nil {
		return nil, err
	}
	if len(v.Prompts) == 0 || len(v.PromptLogits)%len(v.Prompts) != 0 {
		return nil, fmt.Errorf("reftest: %s: %d prompt logits for %d prompts", dir, len(v.PromptLogits), len(v.Prompts))
	}
	return v, nil
}

// Pixels are the images' pixel values as the tower reads them, merged by
// merge.
func (v *Vision) Pixels(merge int) []preprocess.Pixels {
	px := make([]preprocess.Pixels, len(v.Images))
	for i, im := range v.Images {
		px[i] = preprocess.Pixels{
			Grid:  preprocess.Grid{T: im.Grid[0], H: im.Grid[1], W: im.Grid[2]},
			Merge: merge, PatchDim: v.PatchDim, Values: im.Values,
		}
	}
	return px
}
