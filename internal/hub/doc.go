// Package hub downloads a model from the Hugging Face Hub into a folder
// that is either absent or complete and verified: `petal pull` and the
// app's setup screen use it.
//
// # What a pull does
//
// [Pull] lists the files of a repository at a pinned revision through the
// Hub API (sizes, LFS sha256, git blob ids), checks every name and size,
// imports what the Hugging Face cache already holds at that revision,
// checks the free disk space, then fetches the rest in ranged chunks from
// several connections at once. Every file is hashed (sha256 for LFS files,
// the git blob id for the small ones) before it gets its final name, the
// checkpoint is opened as the engine would open it, and only then is the
// staging folder renamed to the model folder. A model folder that exists
// is therefore whole.
//
// # Resuming
//
// Chunks are written in place into preallocated ".part" files; a small
// state file records how many bytes of each chunk are on disk, saved
// after the part files are synced, so after a crash, a reboot or a lost
// connection the next pull fetches only what is missing. A connection
// that delivers nothing for [Options.StallTimeout] is dropped and retried
// with exponential backoff, from where it stopped.
//
// # Trust
//
// Names from the listing are untrusted: absolute paths, "..", empty or
// odd elements, control characters and case-insensitive duplicates are
// refused, and files are created through an [os.Root] of the staging
// folder. The access token goes only to the endpoint's own host, never
// across a redirect to another host (a CDN). Endpoint and token come from
// HF_ENDPOINT and HF_TOKEN unless set in [Options].
package hub
