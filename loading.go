package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"

	"petal/internal/manage"
	"petal/internal/models"
)

// While the model loads, the window is already open: its UI comes from
// the embedded assets, and what it asks of the server is answered here.
// /manage/status says the model is loading (or failed to, with the error),
// which the UI shows and polls until the state is ready; every other call
// gets 503 with Retry-After. Once loaded, every request goes to the
// runtime.

// loadingRetrySeconds is the Retry-After of a call made while loading.
const loadingRetrySeconds = "1"

// Model states of manage.ModelStatus besides manage.StateReady.
const (
	stateLoading = "loading"
	stateFailed  = "failed"
)

func (a *App) serveWindow(w http.ResponseWriter, r *http.Request) {
	if a.loaded() != nil {
		a.window.ServeHTTP(w, r)
		return
	}
	var failed error
	select {
	case <-a.ready:
		failed = a.loadErr
	default:
	}
	if r.Method == http.MethodGet && r.URL.Path == strings.TrimSuffix(manage.Prefix, "/")+"/status" {
		name := filepath.Base(a.dir)
		st := manage.Status{
			Model:    manage.ModelStatus{Name: name, DisplayName: models.DisplayName(a.dir, name), State: stateLoading, Backend: a.backend, Dir: a.dir},
			Endpoint: a.Endpoint,
		}
		if failed != nil {
			st.Model.State, st.Model.Error = stateFailed, failed.Error()
		}
		writeJSON(w, http.StatusOK, st)
		return
	}
	msg, typ := "Petal is loading the model; try again in a moment", "model_loading"
	if failed != nil {
		msg, typ = "the model failed to load: "+failed.Error(), "model_failed"
	} else {
		w.Header().Set("Retry-After", loadingRetrySeconds)
	}
	type apiError struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    any    `json:"code"`
	}
	writeJSON(w, http.StatusServiceUnavailable, struct {
		Error apiError `json:"error"`
	}{apiError{Message: msg, Type: typ}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
