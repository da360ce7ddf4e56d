// Package frontend holds the built web UI (dist/, made by `npm run build`
// from src/) and serves it: index.html for every path that is not a file,
// so the UI's own routes survive a reload, and the hashed files under
// assets/ cached for a year because their names change with their content.
//
// dist/ is committed, so a fresh clone builds without Node; scripts/test.sh
// rebuilds it and fails when the committed copy is stale.
package frontend

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed all:dist
var dist embed.FS

// Cache lifetimes, as Cache-Control values.
const (
	// immutableCache is for assets/, whose names carry a content hash.
	immutableCache = "public, max-age=31536000, immutable"
	// revalidateCache is for index.html and other unhashed files, which
	// change in place with each build.
	revalidateCache = "no-cache"
)

// ContentSecurityPolicy lets the UI load only its own files and talk only
// to its own origin; model output rendered as HTML cannot load or run
// anything even if it got past the sanitizer.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// assetsDir is where Vite writes hashed files.
const assetsDir = "assets/"

// Files returns the built UI, rooted at dist/ (index.html at the top), for
// the desktop window's asset server.
func Files() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		// fs.Sub fails only for an invalid path, and "dist" is valid.
		panic(err)
	}
	return sub
}

// Handler serves the UI. Only GET and HEAD are answered.
func Handler() http.Handler {
	files := Files()
	server := http.FileServerFS(files)
	// index.html is written directly: http.FileServer would redirect
	// /index.html to / and has nothing to say for unknown paths.
	index, indexErr := fs.ReadFile(files, "index.html")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")

		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if strings.HasPrefix(name, assetsDir) {
			if !isFile(files, name) {
				http.NotFound(w, r) // a stale hashed name: never answer it with HTML
				return
			}
			h.Set("Cache-Control", immutableCache)
			server.ServeHTTP(w, r)
			return
		}
		h.Set("Cache-Control", revalidateCache)
		if name == "" || name == "index.html" || !isFile(files, name) {
			if indexErr != nil {
				http.Error(w, "the UI was not built (run npm run build in frontend/)", http.StatusNotFound)
				return
			}
			h.Set("Content-Type", "text/html; charset=utf-8")
			http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(index))
			return
		}
		server.ServeHTTP(w, r)
	})
}

func isFile(files fs.FS, name string) bool {
	st, err := fs.Stat(files, name)
	return err == nil && !st.IsDir()
}
