// Package httpgate holds what Petal's two HTTP surfaces, the API (package
// api: /v1, /api) and the management routes (package manage: /manage),
// share at their gates and in their answers, so that the two cannot drift:
// the API key check, the loopback checks and the JSON reply.
package httpgate

import (
	"crypto/subtle"
	"encoding/json"
	"net"
	"net/http"
	"strings"
)

// KeyMatches reports whether r carries the API key want, compared in
// constant time. The key is taken as a Bearer token (the scheme in any
// case, RFC 9110: some clients send "bearer") or from X-Api-Key, as
// Anthropic's clients send it, so one key header works on every route. An
// empty want matches nothing.
func KeyMatches(r *http.Request, want string) bool {
	key := r.Header.Get("X-Api-Key")
	if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		key = token
	}
	key = strings.TrimSpace(key)
	return want != "" && key != "" && subtle.ConstantTimeCompare([]byte(key), []byte(want)) == 1
}

// FromLoopback reports whether the request came from this machine.
func FromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoopbackHost reports whether host (a Host header's name, without its
// port and brackets) names this machine: "localhost" in any case or a
// loopback address.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NoSniff tells browsers to take a reply as its Content-Type says: a JSON
// answer that echoes a client's text (an error quoting a field) must never
// be sniffed as HTML and run as a page of the server's origin.
func NoSniff(h http.Header) { h.Set("X-Content-Type-Options", "nosniff") }

// WriteJSON answers with v as JSON. "<", ">" and "&" are written as they
// are, not as \u003c and kin, since clients match messages by their text.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	NoSniff(w.Header())
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // a failed write means the client left
}
