package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"mime"
	"net/http"
	"strings"

	"petal/engine/chattemplate"
	"petal/engine/vision/preprocess"
	"petal/internal/service"
)

// Bounds on a request's images, besides preprocess.MaxImagesPerRequest:
// the bytes are checked on the encoded images before any is decoded (the
// decoder bounds each image's pixels itself), the tokens before any is
// preprocessed.
const (
	// MaxImageBytes bounds one encoded image: a 4K screenshot as PNG is 3
	// to 6 MB.
	MaxImageBytes = 8 << 20
	// MaxImagesBytes bounds a request's encoded images together; as base64
	// they fill most of a MaxBodyBytes body.
	MaxImagesBytes = 12 << 20
	// MaxImageTokens bounds the image tokens of a request, one image at
	// the processor's max_pixels (4096² / 32²): the pixel values the vision
	// tower reads take 6,144 float32 a token (four 3·2·16·16 patches), so
	// this keeps a request's at 400 MB.
	MaxImageTokens = preprocess.DefaultMaxPixels / (preprocess.DefaultPatchSize * preprocess.DefaultMergeSize * preprocess.DefaultPatchSize * preprocess.DefaultMergeSize)
)

// imagePart is the content part an image becomes for the chat template,
// which writes the vision markers for a part of type "image" (Qwen's
// template tests item.type == 'image'); its bytes travel in pendingImage.
var imagePart = chattemplate.ContentPart{Type: "image"}

// pendingImage is an image as a request sent it, not yet decoded.
type pendingImage struct {
	// where names it in the request ("messages[0].content[1].image_url"),
	// for errors.
	where string
	data  []byte
}

// imageSet gathers a request's images in the order their parts come, which
// is the order of their markers in the rendered prompt.
type imageSet struct {
	images []pendingImage
	bytes  int
}

// errRemoteImage refuses an image given by address: fetching it would
// make the server a client of any host a request names.
func errRemoteImage(where string) *apiError {
	e := badParam(where, "%s is an image URL: Petal fetches nothing on a client's behalf; send the image inline as base64 (a data: URL such as data:image/png;base64,...)", where)
	e.Code = "image_url_not_supported"
	return e
}

// errImage refuses an image that cannot be read, in every route's words.
func errImage(where, format string, args ...any) *apiError {
	e := badParam(where, "%s: %s", where, fmt.Sprintf(format, args...))
	e.Code = "invalid_image"
	return e
}

// addURL takes an image given as a URL, as OpenAI's image_url and the
// Responses API's input_image give it: a base64 data URL is read, an
// http(s) one refused.
func (s *imageSet) addURL(where, url string) (chattemplate.ContentPart, error) {
	scheme, rest, ok := strings.Cut(url, ":")
	switch scheme = strings.ToLower(scheme); {
	case !ok:
		return chattemplate.ContentPart{}, errImage(where, "the image URL is empty or has no scheme; send a data: URL such as data:image/png;base64,...")
	case scheme == "http" || scheme == "https":
		return chattemplate.ContentPart{}, errRemoteImage(where)
	case scheme != "data":
		return chattemplate.ContentPart{}, errImage(where, "a %q URL cannot be read; send a data: URL such as data:image/png;base64,...", scheme)
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return chattemplate.ContentPart{}, errImage(where, "the data URL has no comma before its data")
	}
	// RFC 2397: data:[<mediatype>][;base64],<data>, where the media type
	// may carry parameters (image/png;charset=x): base64 is the last one.
	const base64Suffix = ";base64"
	if len(meta) < len(base64Suffix) || !strings.EqualFold(meta[len(meta)-len(base64Suffix):], base64Suffix) {
		return chattemplate.ContentPart{}, errImage(where, "the data URL must be base64 (data:image/png;base64,...)")
	}
	return s.addBase64(where, meta[:len(meta)-len(base64Suffix)], payload)
}

// addBase64 takes an image as base64 of its file, with its media type if
// the client gave one ("" when not, as Ollama's images come).
func (s *imageSet) addBase64(where, media, b64 string) (chattemplate.ContentPart, error) {
	if media != "" {
		mt, _, err := mime.ParseMediaType(media)
		if err != nil || !strings.HasPrefix(mt, "image/") {
			return chattemplate.ContentPart{}, errImage(where, "the media type %q is not an image; send PNG, JPEG, WebP or GIF", media)
		}
	}
	if len(s.images) == preprocess.MaxImagesPerRequest {
		e := badParam(where, "%s is one image more than the %d a request may hold (MaxImagesPerRequest)", where, preprocess.MaxImagesPerRequest)
		e.Code = "too_many_images"
		return chattemplate.ContentPart{}, e
	}
	// Bounded on the encoded length, before decoding: base64 is 4 bytes
	// for 3, padding and line breaks aside.
	if n := base64.StdEncoding.DecodedLen(len(b64)); n > MaxImageBytes+3 {
		return chattemplate.ContentPart{}, tooLarge(where, "MaxImageBytes", n, MaxImageBytes)
	}
	data, err := decodeBase64(b64)
	if err != nil {
		return chattemplate.ContentPart{}, errImage(where, "the image is not valid base64: %v", err)
	}
	switch {
	case len(data) == 0:
		return chattemplate.ContentPart{}, errImage(where, "the image is empty")
	case len(data) > MaxImageBytes:
		return chattemplate.ContentPart{}, tooLarge(where, "MaxImageBytes", len(data), MaxImageBytes)
	case s.bytes+len(data) > MaxImagesBytes:
		return chattemplate.ContentPart{}, tooLarge(where, "MaxImagesBytes, all images together", s.bytes+len(data), MaxImagesBytes)
	}
	s.images = append(s.images, pendingImage{where: where, data: data})
	s.bytes += len(data)
	return imagePart, nil
}

// tooLarge names the byte limit an image passed.
func tooLarge(where, limit string, n, most int) *apiError {
	e := badParam(where, "%s: %d bytes of images are more than the %d allowed (%s)", where, n, most, limit)
	e.Code = "image_too_large"
	return e
}

// decodeBase64 reads standard base64, padded or not, ignoring the line
// breaks some encoders insert; URL-safe base64 is taken too.
func decodeBase64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n \t") {
		s = strings.Map(func(r rune) rune {
			if r == '\r' || r == '\n' || r == ' ' || r == '\t' {
				return -1
			}
			return r
		}, s)
	}
	s = strings.TrimRight(s, "=")
	enc := base64.RawStdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.RawURLEncoding
	}
	return enc.DecodeString(s)
}

// errTextOnly refuses images for a model that has no vision tower, in the
// same words on every route.
func errTextOnly(where, model string) *apiError {
	e := &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: where, Code: "model_text_only",
		Message: fmt.Sprintf("%s is an image, but the loaded model %q is text-only (its checkpoint has no vision tower): send text, or load a model that reads images", where, model)}
	return e
}

// MaxImageWork bounds the images being decoded or preprocessed at once,
// process-wide, whatever the number of requests: each holds up to
// preprocess.MaxDecodedBytes of decoder memory, and its preprocessing the
// resize buffers and up to 400 MB of pixel values (MaxImageTokens). Two
// keep that near a GB at worst and the machine's cores for the engine; a
// request waiting for a place leaves the wait when its client does.
const MaxImageWork = 2

// imageWork holds the places MaxImageWork allows.
var imageWork = make(chan struct{}, MaxImageWork)

// withImageWork runs f in a place of imageWork, or returns ctx's error if
// ctx ends first.
func withImageWork[T any](ctx context.Context, f func() (T, error)) (T, error) {
	select {
	case imageWork <- struct{}{}:
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
	defer func() { <-imageWork }()
	return f()
}

// readImages checks the request's images for the loaded model and hands
// them to the service with the request, each as its grid and its
// compressed file: the service makes the pixel values when the request
// reaches the engine (service.Image.Load), so a queued request holds no
// decoded image. A text-only model refuses them before any is read; each
// image is bounded from its header, the request's image tokens from the
// headers' sizes, and each file is then decoded once (under MaxImageWork,
// the pixels dropped) so that a broken one is a 400 now, not a failure
// once queued.
func (s *Server) readImages(ctx context.Context, req *service.Request, set *imageSet) error {
	cfg, err := s.shapeImages(req, set)
	if err != nil || len(set.images) == 0 {
		return err
	}
	for i, p := range set.images {
		data := p.data
		if _, err := withImageWork(ctx, func() (image.Image, error) { return preprocess.Decode(data, preprocess.DefaultLimits()) }); err != nil {
			if errors.Is(err, preprocess.ErrRefused) {
				return errImage(p.where, "%v", err)
			}
			return err
		}
		req.Images[i].Load = func(ctx context.Context) ([]float32, error) {
			return withImageWork(ctx, func() ([]float32, error) {
				img, err := preprocess.Decode(data, preprocess.DefaultLimits())
				if err != nil {
					return nil, err
				}
				px, err := preprocess.Preprocess(img, cfg)
				return px.Values, err
			})
		}
	}
	return nil
}

// countImages gives the request its images' grids, from their headers
// alone, for a route that only counts tokens: nothing is decoded.
func (s *Server) countImages(req *service.Request, set *imageSet) error {
	_, err := s.shapeImages(req, set)
	return err
}

// shapeImages checks each image's file from its header (preprocess.Probe)
// and appends it to req.Images as its grid (preprocess.Shape) without
// values, refusing the request past MaxImageTokens; it returns the
// model's processor config.
func (s *Server) shapeImages(req *service.Request, set *imageSet) (preprocess.Config, error) {
	if len(set.images) == 0 {
		return preprocess.Config{}, nil
	}
	info := s.svc.Info()
	if !info.Vision {
		return preprocess.Config{}, errTextOnly(set.images[0].where, info.Name)
	}
	cfg, err := preprocess.LoadConfig(info.Dir)
	if err != nil {
		return cfg, fmt.Errorf("the model's %s: %w", preprocess.ConfigFile, err)
	}
	tokens := 0
	for _, p := range set.images {
		w, h, err := preprocess.Probe(p.data, preprocess.DefaultLimits())
		if err != nil {
			return cfg, errImage(p.where, "%v", err)
		}
		px, err := preprocess.Shape(h, w, cfg)
		if err != nil {
			return cfg, errImage(p.where, "%v", err)
		}
		if tokens += px.Tokens(); tokens > MaxImageTokens {
			e := badParam(p.where, "%s: the images up to this one take %d tokens, more than the %d a request may hold (MaxImageTokens); send smaller or fewer images", p.where, tokens, MaxImageTokens)
			e.Code = "image_too_large"
			return cfg, e
		}
		req.Images = append(req.Images, service.Image{Pixels: px, Hash: sha256.Sum256(p.data)})
	}
	return cfg, nil
}
