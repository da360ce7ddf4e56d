package preprocess

import (
	"errors"
	"fmt"
)

// The limits a decoded image must keep. They follow from what the processor
// keeps of an image anyway: it shrinks any image past its max_pixels
// ([DefaultMaxPixels], 4096² = 16,777,216 for Qwen3.6) to fit within it, so
// pixels past that only cost memory and time. The pixel bound is twice
// that, so a 24-megapixel camera photo (6000x4000) or an 8K screenshot
// (7680x4320) still goes in and is shrunk as the processor would; a bigger
// file gains the model nothing.
const (
	// MaxBytes bounds an encoded image: 20 MiB, OpenAI's own cap per image.
	// Every format here compresses a 33-megapixel photo well under it.
	MaxBytes = 20 << 20

	// MaxPixels bounds width·height from the header: twice the
	// processor's max_pixels (see above).
	MaxPixels = 2 * DefaultMaxPixels

	// MaxSide bounds either side from the header. The processor refuses an
	// aspect ratio past [MaxAspect], so at [MaxPixels] no usable image has
	// a side past sqrt(MaxPixels·MaxAspect) ≈ 81,900; 16,384 keeps panoramas
	// and long screenshots (16384x2048) and refuses a side no screen or
	// camera produces before a decoder allocates a row buffer for it.
	MaxSide = 16384

	// MaxDecodedBytes bounds what Go's decoder allocates for the file,
	// counted from its headers before decoding (decodeCost): the pixels as
	// it stores them (8-bit RGBA: 4 bytes a pixel, 16-bit: 8) and its
	// working buffers (a progressive JPEG's coefficients, 4 bytes a sample;
	// a lossless WebP's second ARGB buffer). 128 MiB is an 8-bit RGBA image
	// at [MaxPixels] exactly, so a 16-bit PNG may have half the pixels and a
	// progressive 4:2:0 JPEG (7.5 bytes a pixel) about 17.9 megapixels.
	// With the resize buffers this keeps one image's decoding well under
	// 256 MB.
	MaxDecodedBytes = 128 << 20

	// MaxFrames bounds a GIF's frames, counted from its blocks without
	// decoding them. Only the first frame is used (as PIL opens a GIF); an
	// animation of more is refused rather than scanned or stored, and 256
	// frames keeps every ordinary animated sticker or screen recording.
	MaxFrames = 256

	// MaxImagesPerRequest bounds the images of one request. An image at the
	// processor's max_pixels takes 16,384 tokens ([DefaultMaxPixels] / 32²),
	// so 16 of them fill the model's 262,144-token context: more can never
	// fit in a prompt.
	MaxImagesPerRequest = 16

	// MaxAspect is the processor's own refusal (smart_resize raises a
	// ValueError) of a long side over 200 times the short one.
	MaxAspect = 200
)

// Limits bounds what [Decode] accepts; [DefaultLimits] gives the named
// constants. A zero field means no bound on that quantity.
type Limits struct {
	Bytes        int64 // encoded size
	Side         int   // width or height from the header
	Pixels       int64 // width·height from the header
	DecodedBytes int64 // what the decoder allocates, counted from the headers
	Frames       int   // a GIF's frames
}

// DefaultLimits returns the limits of the named constants.
func DefaultLimits() Limits {
	return Limits{
		Bytes:        MaxBytes,
		Side:         MaxSide,
		Pixels:       MaxPixels,
		DecodedBytes: MaxDecodedBytes,
		Frames:       MaxFrames,
	}
}

// ErrRefused marks every image this package refuses, for the client's
// fault: a [*LimitError] or a file that is not a whole, valid image. A route
// answers 400 with the error's text.
var ErrRefused = errors.New("image refused")

// LimitError says which limit an image broke, its value and the image's.
type LimitError struct {
	Limit string // the constant's name, such as "MaxPixels"
	What  string // what was measured, such as "width·height"
	Max   int64  // the limit's value
	Got   int64  // the image's value
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("image refused: %s %d is over the limit %s = %d", e.What, e.Got, e.Limit, e.Max)
}

// Is makes errors.Is(err, ErrRefused) hold for every limit.
func (e *LimitError) Is(target error) bool { return target == ErrRefused }

// CheckCount refuses a request with more than [MaxImagesPerRequest] images.
func CheckCount(n int) error {
	if n > MaxImagesPerRequest {
		return &LimitError{Limit: "MaxImagesPerRequest", What: "images in the request", Max: MaxImagesPerRequest, Got: int64(n)}
	}
	return nil
}

// invalid wraps a decoder's complaint about a file as a refusal.
func invalid(format string, err error) error {
	return fmt.Errorf("%w: not a whole, valid %s file: %v", ErrRefused, format, err)
}
