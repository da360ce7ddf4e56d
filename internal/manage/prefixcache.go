package manage

import (
	"net/http"

	"petal/internal/httpgate"
)

// PrefixCache is the prefix cache's disk tier as the Settings screen shows
// and clears it.
type PrefixCache interface {
	// PrefixCacheStatus is the tier's folder, budget and contents now.
	PrefixCacheStatus() PrefixCacheStatus
	// ClearPrefixCache removes every snapshot and says how many files and
	// bytes went.
	ClearPrefixCache() (files int, bytes int64, err error)
}

// PrefixCacheStatus is GET /manage/prefix-cache's answer.
type PrefixCacheStatus struct {
	// Enabled is false when the server runs without a disk tier; the
	// other fields are then zero.
	Enabled bool   `json:"enabled"`
	Dir     string `json:"dir,omitempty"`
	// On is false once a full disk turned the tier off until a restart.
	On          bool  `json:"on"`
	BudgetBytes int64 `json:"budget_bytes"`
	Files       int   `json:"files"`
	Bytes       int64 `json:"bytes"`
}

// prefixCacheCleared is POST /manage/prefix-cache/clear's answer.
type prefixCacheCleared struct {
	Files int   `json:"removed_files"`
	Bytes int64 `json:"removed_bytes"`
}

func (h *Handler) prefixCache(w http.ResponseWriter, r *http.Request) {
	if h.opts.PrefixCache == nil {
		httpgate.WriteJSON(w, http.StatusOK, PrefixCacheStatus{})
		return
	}
	httpgate.WriteJSON(w, http.StatusOK, h.opts.PrefixCache.PrefixCacheStatus())
}

func (h *Handler) clearPrefixCache(w http.ResponseWriter, r *http.Request) {
	if h.opts.PrefixCache == nil {
		notAvailable(w, "a prefix cache on disk")
		return
	}
	var empty struct{}
	if !decode(w, r, &empty) {
		return
	}
	files, bytes, err := h.opts.PrefixCache.ClearPrefixCache()
	if err != nil {
		h.log.Printf("manage: clearing the prefix cache: %v", err)
		writeError(w, http.StatusInternalServerError, "clear_failed", "the prefix cache could not be cleared; the server log says why")
		return
	}
	httpgate.WriteJSON(w, http.StatusOK, prefixCacheCleared{Files: files, Bytes: bytes})
}
