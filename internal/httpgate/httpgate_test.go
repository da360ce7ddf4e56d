package httpgate

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestKeyMatches(t *testing.T) {
	const key = "0123456789abcdef"
	for _, c := range []struct {
		name   string
		header map[string]string
		want   string
		ok     bool
	}{
		{"bearer", map[string]string{"Authorization": "Bearer " + key}, key, true},
		{"scheme in lower case", map[string]string{"Authorization": "bearer " + key}, key, true},
		{"x-api-key", map[string]string{"X-Api-Key": key}, key, true},
		{"surrounding space", map[string]string{"X-Api-Key": " " + key + " "}, key, true},
		{"wrong", map[string]string{"Authorization": "Bearer nope"}, key, false},
		{"basic scheme", map[string]string{"Authorization": "Basic " + key}, key, false},
		{"prefix of the key", map[string]string{"X-Api-Key": key[:8]}, key, false},
		{"none sent", nil, key, false},
		{"no key set, none sent", nil, "", false},
		{"no key set, one sent", map[string]string{"X-Api-Key": "x"}, "", false},
		// The Bearer token wins: a wrong one is not saved by X-Api-Key.
		{"wrong bearer, right x-api-key", map[string]string{"Authorization": "Bearer nope", "X-Api-Key": key}, key, false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for k, v := range c.header {
			r.Header.Set(k, v)
		}
		if got := KeyMatches(r, c.want); got != c.ok {
			t.Errorf("%s: KeyMatches = %v, want %v", c.name, got, c.ok)
		}
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000": true, "127.3.4.5:1": true, "[::1]:80": true,
		"192.168.1.2:5000": false, "[fe80::1]:80": false, "localhost:80": false, "garbage": false,
	} {
		r := &http.Request{RemoteAddr: addr}
		if got := FromLoopback(r); got != want {
			t.Errorf("FromLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
	for host, want := range map[string]bool{
		"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.0.0.2": true, "::1": true,
		"localhost.evil.example": false, "evil.localhost": false, "10.0.0.1": false, "": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestWriteJSONKeepsAngleBrackets(t *testing.T) {
	w := httptest.NewRecorder()
	WriteJSON(w, 418, map[string]string{"message": "use <think> & </think>"})
	if w.Code != 418 || w.Header().Get("Content-Type") != "application/json" ||
		w.Body.String() != `{"message":"use <think> & </think>"}`+"\n" {
		t.Errorf("%d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
}
