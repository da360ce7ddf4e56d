package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"reflect"
	"strings"

	"petal/internal/service"
)

// MaxDecoding bounds the request bodies decoded at once. Decoding takes
// about twice a body's size on top of it (the value's strings, and raw
// fields decoded again by their own decoders), so eight 16 MB bodies
// decoded together held over 500 MB. A body waits for a place only once it
// has arrived whole, so a slow client holds none.
const MaxDecoding = 2

// decoding holds a place per body being decoded, for the whole process:
// the bound is on its memory.
var decoding = make(chan struct{}, MaxDecoding)

// Bounds of the pieces a body is read in: they grow as bytes arrive, so
// memory follows what the client sent, whatever its Content-Length says,
// and the body is copied once, into a buffer of its exact size.
const (
	firstBodyChunk = 4 << 10
	maxBodyChunk   = 1 << 20
)

// decodeBody reads a JSON request body into v. Unknown fields are
// accepted, as clients send many that do not concern this server; anything
// but white space after the value is not, as it means the client sent
// something other than what it meant (two bodies, a cut-and-paste slip).
func decodeBody(r *http.Request, v any) error {
	data, err := readBody(r.Body)
	if err == nil {
		err = decodeJSON(r.Context(), data, v)
	}
	var tooBig *http.MaxBytesError
	var ae *apiError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &apiError{Status: http.StatusRequestTimeout, Type: "invalid_request_error", Code: "body_timeout",
			Message: "the request body did not arrive in time"}
	case errors.As(err, &tooBig):
		return err
	case errors.As(err, &ae):
		return ae // a field's own decoder said what is wrong
	case errors.Is(err, io.EOF):
		return badRequest("the request body is empty; send a JSON object")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		// The client knows the JSON field and JSON's kinds of value, not
		// the Go structs and types behind them.
		field := jsonPath(reflect.TypeOf(v), typeErr.Field)
		if key, ok := strings.CutPrefix(typeErr.Value, "key "); ok {
			return badParam(field, "field %q: key %s must be %s", field, key, jsonKind(typeErr.Type))
		}
		return badParam(field, "field %q must be %s, not %s", field, jsonKind(typeErr.Type), jsonValue(typeErr.Value))
	}
	return badRequest("the request body is not valid JSON: %v", err)
}

// jsonPath is the path encoding/json reports (the fields from the root,
// dotted) without the embedded structs, which it names by their Go type
// but which are no part of the JSON; t is the decoded value's type.
func jsonPath(t reflect.Type, path string) string {
	var out []string
	for part := range strings.SplitSeq(path, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) {
			t = t.Elem()
		}
		var next reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			if f, ok := t.FieldByName(part); ok && f.Anonymous && f.Tag.Get("json") == "" {
				t = f.Type
				continue
			}
			for _, f := range reflect.VisibleFields(t) {
				if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == part || name == "" && f.Name == part {
					next = f.Type
					break
				}
			}
		}
		out = append(out, part)
		t = next
	}
	return strings.Join(out, ".")
}

// jsonKind says what JSON value decodes into t.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another kind of value"
}

// jsonValue says what encoding/json found ("number", "number 1.5",
// "string", "bool", "array", "object") as a client would.
func jsonValue(v string) string {
	switch v {
	case "bool":
		return "true or false"
	case "array", "object":
		return "an " + v
	case "number", "string":
		return "a " + v
	}
	// "number 1.5": a number where an integer goes.
	return strings.TrimPrefix(v, "number ")
}

// readBody reads body to its end.
func readBody(body io.Reader) ([]byte, error) {
	var chunks [][]byte
	total, size := 0, firstBodyChunk
	for {
		c := make([]byte, size)
		n, err := io.ReadFull(body, c)
		chunks, total = append(chunks, c[:n]), total+n
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(2*size, maxBodyChunk)
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	data := make([]byte, 0, total)
	for _, c := range chunks {
		data = append(data, c...)
	}
	return data, nil
}

// decodeJSON decodes data, one JSON value and white space, into v once a
// place in decoding is free.
func decodeJSON(ctx context.Context, data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return io.EOF
	}
	select {
	case decoding <- struct{}{}:
	case <-ctx.Done():
		// Both: callers map ctx.Err() to the cancelled answer, the cause
		// says why.
		if cause := context.Cause(ctx); cause != ctx.Err() {
			return fmt.Errorf("%w: %w", ctx.Err(), cause)
		}
		return ctx.Err()
	}
	defer func() { <-decoding }()
	err := json.Unmarshal(data, v)
	// Unmarshal checks the whole input first: a syntax error right after
	// a whole value is data after it.
	if se, ok := errors.AsType[*json.SyntaxError](err); ok && se.Offset > 0 && json.Valid(data[:se.Offset-1]) {
		return badRequest("the request body holds more after its JSON value (at %q); send one JSON object", data[se.Offset-1])
	}
	return err
}

// generationRequest is a request body that maps to a generation.
type generationRequest interface {
	toService() (*service.Request, error)
	// images are the images toService read, not yet decoded.
	images() *imageSet
}

// begin decodes r's body into body, maps it to a generation request from
// r's client and starts it, for the routes whose body says all of it.
func (s *Server) begin(r *http.Request, body generationRequest) (*service.Generation, error) {
	if err := decodeBody(r, body); err != nil {
		return nil, err
	}
	req, err := body.toService()
	if err != nil {
		return nil, err
	}
	if err := s.readImages(r.Context(), req, body.images()); err != nil {
		return nil, err
	}
	req.Client = clientOf(r)
	return s.svc.Begin(r.Context(), req)
}

// stopList is "stop" as clients send it: a string, a list of strings or
// null.
type stopList []string

func (s *stopList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return badParam("stop", "stop must be a string or a list of strings")
	}
	*s = many
	return nil
}

// MaxReplyTokens bounds a reply limit (max_tokens and its kin): far above
// any model's context (Qwen3.6 has 262,144 positions), and low enough that
// a prompt's count added to it, as the context error says it, cannot
// overflow into a negative number.
const MaxReplyTokens = math.MaxInt32

// maxTokens picks the reply limit from the fields that may carry it; 0
// means none.
func maxTokens(fields ...*int) (int, error) {
	for _, f := range fields {
		if f == nil {
			continue
		}
		if *f < 1 || *f > MaxReplyTokens {
			return 0, badParam("max_tokens", "max_tokens must be 1 to %d, not %d", MaxReplyTokens, *f)
		}
		return *f, nil
	}
	return 0, nil
}

// checkN accepts n only as 1: one reply per request.
func checkN(n *int) error {
	if n != nil && *n != 1 {
		return badParam("n", "n must be 1: this server generates one reply per request")
	}
	return nil
}

// MaxClientName bounds the client name taken from User-Agent.
const MaxClientName = 128

// clientOf names the application behind a request for the queue's turns:
// its User-Agent, which tells editors, agents and the chat window apart
// (they all come from loopback).
func clientOf(r *http.Request) string {
	ua := r.UserAgent()
	return ua[:min(len(ua), MaxClientName)]
}

// idRandomBytes is how many random bytes a response id holds.
const idRandomBytes = 12

// newID returns a response id with the given prefix.
func newID(prefix string) string {
	var b [idRandomBytes]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
