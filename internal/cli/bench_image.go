package cli

import (
	"image"
	"image/color"
	"time"

	"petal/engine"
	"petal/engine/vision/preprocess"
)

// The image the bench encodes: issue 34's 1024x768, a phone photo's
// aspect. Its pixels are a smooth gradient (the tower's work does not
// depend on them); the warm-up image places the tower's weights first.
const (
	benchImageWidth  = 1024
	benchImageHeight = 768
	benchWarmupSide  = 64
)

// benchImage is an arm's image encode: the tower over one image, from
// the preprocessed pixels to the merged features in hand.
type benchImage struct {
	Width    int     `json:"width"`
	Height   int     `json:"height"`
	Patches  int     `json:"patches"`
	Tokens   int     `json:"tokens"`
	WallSecs float64 `json:"wall_secs"`
}

// imageEncoder is a model that runs its vision tower on request (the CPU
// and GPU backends).
type imageEncoder interface {
	Vision() bool
	EncodeImage(preprocess.Pixels) ([]float32, error)
}

// benchImageEncode times the tower over the bench image after a warm-up
// on a small one; nil for a model that reads no images.
func benchImageEncode(m engine.Model, dir string) (*benchImage, error) {
	enc, ok := m.(imageEncoder)
	if !ok || !enc.Vision() {
		return nil, nil
	}
	cfg, err := preprocess.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	warm, err := preprocess.Preprocess(gradient(benchWarmupSide, benchWarmupSide), cfg)
	if err != nil {
		return nil, err
	}
	if _, err := enc.EncodeImage(warm); err != nil {
		return nil, err
	}
	px, err := preprocess.Preprocess(gradient(benchImageWidth, benchImageHeight), cfg)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	feats, err := enc.EncodeImage(px)
	if err != nil {
		return nil, err
	}
	return &benchImage{
		Width: benchImageWidth, Height: benchImageHeight, Patches: px.Grid.Patches(),
		Tokens: len(feats) / m.Config().Hidden, WallSecs: time.Since(start).Seconds(),
	}, nil
}

// gradient is a w x h RGB image whose channels ramp across and down it.
func gradient(w, h int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{R: uint8(255 * x / w), G: uint8(255 * y / h), B: uint8((x + y) % 256), A: 255})
		}
	}
	return img
}
