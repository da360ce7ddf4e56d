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
// # Realigned shards
//
// Metal binds a tensor in place only at an offset aligned to what its
// kernel reads, and MLX's writer packs a shard without any padding: its
// data section starts wherever its header ends, and a tensor of 4 bytes
// shifts every one after it. So each .safetensors file is stored
// realigned, in the same single pass that writes the download: the header
// is rewritten with spaces after it, as the format allows, so the data
// section starts on a 16-byte boundary, and the tensors' data are ordered
// by the largest power of two (up to 16) dividing their size, which puts
// every tensor on that boundary (on 16 for every tensor whose size is a
// multiple of 16). No gap is ever put between tensors: the reference
// reader (Python's safetensors) refuses bytes that no tensor covers (bytes
// an original has between its tensors are kept after them). A shard
// already aligned that well is stored as served.
//
// The original header region is fetched first (two small requests: the
// length, then the header), kept apart in the staging folder, and the
// layout planned from it; every data byte then has a fixed place in the
// stored file, so chunks are written in place and resume as before. The
// Hub's sha256 is checked over the original's bytes: the kept header
// region, then the data read back from the stored file in the original's
// order. The manifest keeps the original header region and the stored
// header region's hash, so [Verify] repeats that check later.
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
// # Tensors from another repository
//
// The 4-bit MLX checkpoint lacks the multi-token-prediction head its
// original has (mlx-lm's conversion drops mtp.*). After the main files,
// a pull of [DefaultRepo] fetches just those tensors from [MTPSourceRepo]
// by HTTP range requests: the original's index names each tensor's shard,
// two small requests read a shard's header, and one request per run of
// adjacent wanted tensors brings their bytes into a raw file beside the
// model folder, whose state file records the bytes of each range on disk
// (resume, cancel, retries and stalls as for the main files). A server
// that answers a range with the whole file is refused ([ErrNoRanges]).
// Since the Hub's sha256 covers whole files only, every tensor is checked
// against a manifest of per-tensor hashes pinned in the repository
// (internal/hub/pinned, made once by tools/tensormanifest); with none,
// nothing is fetched ([MTPNotice] says so). The head is then converted
// as MLX converts the main layers (package mlxquant), stored as
// checkpoint.MTPFile in the realigned layout below, checked by opening the
// checkpoint, and listed in the manifest, so [Verify] and [Delete] treat
// it as the other files. [TensorFilter] picks the tensors, so the vision
// tower can come the same way.
//
// # Importing
//
// [Import] stores a folder already on disk (a Hugging Face cache
// snapshot, a checkpoint downloaded or converted elsewhere) as a model
// folder the same way: shards realigned, other files hard-linked, every
// file hashed. A snapshot's blobs are named by their hashes, and a folder
// Petal pulled keeps the Hub's in its manifest, so those are checked; a
// plain folder's are recorded for [Verify]. A folder imported into itself
// is realigned in place, which is how a model pulled before shards were
// stored realigned becomes aligned.
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
