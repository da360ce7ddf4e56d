package api

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"petal/internal/httpgate"
)

// PreflightMaxAge is how long, in seconds, a browser may cache an allowed
// preflight.
const PreflightMaxAge = 600

// gate checks what every request must satisfy before its handler runs.
func (s *Server) gate(w http.ResponseWriter, r *http.Request, rt *route) error {
	if !s.hostAllowed(r) {
		return &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "host_not_allowed",
			Message: "the Host header " + strconv.Quote(r.Host) + " does not name this server"}
	}
	origin := r.Header.Get("Origin")
	if origin != "" || r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		if !s.originAllowed(origin, r.Host) {
			return &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "origin_not_allowed",
				Message: "cross-origin requests from " + strconv.Quote(origin) + " are not allowed"}
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key, Anthropic-Version")
		h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
		h.Set("Access-Control-Max-Age", strconv.Itoa(PreflightMaxAge))
	}
	if rt == nil {
		return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "no route " + strconv.Quote(r.URL.Path)}
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	if _, ok := rt.methods[method]; !ok && !(method == http.MethodOptions && origin != "") {
		allow := make([]string, 0, len(rt.methods))
		for m := range rt.methods {
			allow = append(allow, m)
		}
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
			Message: r.Method + " is not allowed here; use " + strings.Join(allow, " or ")}
	}
	if method == http.MethodOptions {
		return nil
	}
	if s.opts.APIKey != "" && !rt.public && !httpgate.KeyMatches(r, s.opts.APIKey) {
		how := "\"Authorization: Bearer KEY\""
		if rt.errors == anthropicErrors {
			how = "\"x-api-key: KEY\" (or \"Authorization: Bearer KEY\")"
		}
		return &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "missing or wrong API key: send it as " + how}
	}
	if method == http.MethodPost || method == http.MethodDelete {
		// A browser sends an Origin with every POST and may send a form or
		// text/plain to any site without asking first, so a page's body
		// must say JSON; a caller without one (curl's -d sends a form type,
		// or none) is no browser and its body is read as JSON whatever its
		// type says, as Ollama and llama-server do.
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if origin != "" && (err != nil || mt != "application/json") {
			return &apiError{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type",
				Message: "the request body must be JSON, sent with \"Content-Type: application/json\""}
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		// A client that stops mid-body must not hold its connection
		// forever. The server lifts the connection's deadline itself once
		// the body ends, for its read in the background that watches for
		// the client going away during a reply.
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.BodyReadTimeout))
	}
	return nil
}

// hostAllowed reports whether the Host header names this server, the
// guard against DNS rebinding: a page of another site whose name was
// pointed at this machine reaches it under that name. Allowed are a
// loopback name, one of the allowed hosts, the address the request
// arrived at (a machine on the network names the server by that address;
// a rebinding page names it by a domain, never by an address), and any
// name on a request that carries the API key: the key is what a
// rebinding page cannot know, so a client that sends it may name the
// server as its network does (mybox.local, a VPN's name).
func (s *Server) hostAllowed(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if httpgate.LoopbackHost(host) || host != "" && s.hosts[host] || arrivedAt(r, host) {
		return true
	}
	return httpgate.KeyMatches(r, s.opts.APIKey) // false without a key set
}

// arrivedAt reports whether host is the IP address of the connection's
// own end: the address of this machine the request was sent to.
func arrivedAt(r *http.Request, host string) bool {
	ip := net.ParseIP(host)
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	return ip != nil && ok && !local.IP.IsUnspecified() && local.IP.Equal(ip)
}

// appSchemes are the origin schemes of pages that an application installed
// on this machine serves from its own files (editor webviews, desktop apps,
// browser extensions), never a web site: allowed by default, as Ollama
// allows them, since their code runs on the machine already.
var appSchemes = []string{"vscode-webview", "vscode-file", "app", "chrome-extension", "moz-extension", "tauri"}

// originAllowed reports whether a browser at origin may call the API: the
// origin is listed, it is the server itself, an application's (appSchemes)
// or a page served on this machine's loopback (a local tool's own page, any
// port). Web origins are refused unless listed.
func (s *Server) originAllowed(origin, host string) bool {
	if origin == "" {
		return false
	}
	if slices.Contains(s.opts.AllowedOrigins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if slices.Contains(appSchemes, u.Scheme) {
		return true
	}
	web := u.Scheme == "http" || u.Scheme == "https"
	return web && (strings.EqualFold(u.Host, host) || httpgate.LoopbackHost(u.Hostname()))
}
