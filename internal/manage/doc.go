// Package manage is the management API the UI uses: model status, the
// memory-fit verdict, the model download, loading, and settings. It lives
// under /manage, apart from the OpenAI-compatible /v1 routes, because
// these routes change the machine (they download, delete and rewrite
// settings) and must never be reachable from another web page.
//
// # Routes
//
//	GET  /manage/status            model state, endpoint URL, which features are wired in
//	GET  /manage/fit?context=N     the memory verdict at a context length
//	GET  /manage/download          download progress
//	POST /manage/download/{action} start, pause, resume, cancel, verify or delete
//	POST /manage/model/load        serve the downloaded model in place of the current one
//	GET  /manage/settings          settings and which of them wait for a restart
//	PUT  /manage/settings          replace the settings
//
// Routes whose feature is not wired in (no downloader, no fit check, no
// loader) answer 404 with code "not_available"; the UI hides what they
// drive, reading the flags in /manage/status.
//
// # Security
//
// Every route sits behind [http.CrossOriginProtection], so a browser
// cannot send a state-changing request from another origin, and no route
// sends CORS headers, so no other origin can read an answer either.
// Requests from another machine are refused unless the server has an API
// key and the request carries it; bodies must be JSON
// ("Content-Type: application/json"), at most [MaxBodyBytes], with no
// unknown fields. The Host header is checked by the server in front
// (package api) before a request reaches this package.
//
// Errors have the OpenAI shape the UI reads everywhere:
// {"error": {"message", "type", "code"}}; the UI switches on code. A
// refused load says why: not_downloaded, does_not_fit (with the memory
// verdict), load_busy, model_damaged ([CodeDamaged]), or load_failed.
// model_damaged is the one code, for a load or a download, of every error
// marked [petal/engine/damaged.Err] (a bad shard, config, tokenizer or template): its
// message tells the user to download the model again. A 500 says what
// failed and no more; the cause goes to the log.
package manage
