package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// readBody returns the body whole at every size around its chunk
// boundaries, read in pieces as a network delivers them.
func TestReadBodyWhole(t *testing.T) {
	for _, n := range []int{0, 1, firstBodyChunk - 1, firstBodyChunk, firstBodyChunk + 1, 3*firstBodyChunk + 7, 3<<20 + 5} {
		want := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		got, err := readBody(iotest.HalfReader(bytes.NewReader(want)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%d bytes: read %d bytes, %v", n, len(got), err)
		}
		if n > maxBodyChunk && cap(got) != n {
			t.Errorf("%d bytes: the body is held in %d bytes, want its size", n, cap(got))
		}
	}
	fault := errors.New("connection reset")
	if _, err := readBody(io.MultiReader(strings.NewReader("{"), iotest.ErrReader(fault))); !errors.Is(err, fault) {
		t.Errorf("a failing body: %v, want its error", err)
	}
}

// A body waits for a place among MaxDecoding, and stops waiting when its
// request ends.
func TestDecodingPlacesAreBounded(t *testing.T) {
	for range MaxDecoding {
		decoding <- struct{}{}
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan error)
	go func() {
		var v map[string]any
		done <- decodeJSON(ctx, []byte(`{"a":1}`), &v)
	}()
	gone := errors.New("client gone")
	cancel(gone)
	if err := <-done; !errors.Is(err, gone) {
		t.Errorf("waiting for a place: %v, want the request's cause", err)
	}
	// The whole body path answers as a cancelled request, not as bad JSON.
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"a":1}`))
	if e := errorFor(decodeBody(r, new(any)), log.New(io.Discard, "", 0)); e.Status != statusClientClosed {
		t.Errorf("a body cut off by its request's cause: %d %q, want %d", e.Status, e.Message, statusClientClosed)
	}
	for range MaxDecoding {
		<-decoding
	}
	var v struct{ A int }
	if err := decodeJSON(t.Context(), []byte(" {\"a\":1} \n"), &v); err != nil || v.A != 1 {
		t.Errorf("decoded %+v, %v", v, err)
	}
	for _, bad := range []string{`{"a":1}x`, `{"a":1}{"a":2}`, `[1] 2`} {
		var ae *apiError
		if err := decodeJSON(t.Context(), []byte(bad), new(any)); !errors.As(err, &ae) || !strings.Contains(ae.Message, "more after its JSON value") {
			t.Errorf("%s: %v, want data after the value refused", bad, err)
		}
	}
	if err := decodeJSON(t.Context(), []byte(`{"a":x}`), new(any)); err == nil || strings.Contains(err.Error(), "more after") {
		t.Errorf(`{"a":x}: %v, want a syntax error`, err)
	}
	if err := decodeJSON(t.Context(), []byte(" \n"), new(any)); !errors.Is(err, io.EOF) {
		t.Errorf("white space only: %v, want io.EOF (empty)", err)
	}
}
