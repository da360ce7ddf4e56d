// Package prefixdisk keeps the prefix cache's snapshots on disk, so that a
// long system prompt's state survives a restart, a model swap or the memory
// tier's eviction.
//
// A snapshot is one file named for its model, its token count and a hash
// of its tokens: "<model>-<tokens>-<hash>.pfx". The file starts with a
// fixed header (a magic string, the format version, the model's identity
// hash, the token count, the payload's length and a CRC-32C of everything
// after the header), then the tokens themselves, then the backend's saved
// state. A file whose header, tokens or checksum disagree with what was
// asked is deleted and logged, never loaded.
//
// Files are written by one goroutine per Store, behind a short queue that
// drops a snapshot rather than wait: a reply never waits for the disk.
// Each is written to a temporary file in the same folder, synced and
// renamed, so a reader (in this process or another sharing the folder)
// sees a whole file or none; a temporary file left by a killed writer is
// never read and is removed once stale (when a Store opens, and after each
// of its writes). Eviction removes the least recently used files (by
// modification time, which a load refreshes) past the byte budget and
// tolerates files another process removed first. A full disk turns the
// Store off with one log line.
package prefixdisk
