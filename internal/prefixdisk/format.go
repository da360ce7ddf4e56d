package prefixdisk

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// The file format.
const (
	// FormatVersion changes whenever a file's layout or a backend's saved
	// state changes; files of another version are deleted when met.
	FormatVersion = 1
	magic         = "PETALPFX"
	headerBytes   = 64
	fileSuffix    = ".pfx"
	tempPrefix    = ".tmp-"
	// modelNameHex is how much of the model's identity hash a file name
	// carries, enough to list one model's files without opening them; the
	// header holds all of it.
	modelNameHex = 16
	// tokenNameHex is how much of the tokens' hash a file name carries;
	// the tokens themselves are compared on load.
	tokenNameHex = 32
	// MaxTokens bounds a snapshot's token count, read from a header before
	// anything is allocated for it.
	MaxTokens = 1 << 22
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ModelID is the identity of a model's saved states: a hash of the
// checkpoint's identity and the backend's numerics class.
type ModelID [sha256.Size]byte

// NewModelID hashes a model's identity: its checkpoint identity (see
// CheckpointIdentity) and the backend's state class.
func NewModelID(checkpoint, class string) ModelID {
	return sha256.Sum256([]byte("petal prefix model\x00" + checkpoint + "\x00" + class))
}

func (id ModelID) prefix() string { return hex.EncodeToString(id[:])[:modelNameHex] }

// header is a file's fixed start.
type header struct {
	version uint32
	model   ModelID
	tokens  uint32
	crc     uint32 // of the tokens and the payload
	payload uint64
}

func (h *header) encode() []byte {
	b := make([]byte, headerBytes)
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[8:], h.version)
	copy(b[16:48], h.model[:])
	binary.LittleEndian.PutUint32(b[48:], h.tokens)
	binary.LittleEndian.PutUint32(b[52:], h.crc)
	binary.LittleEndian.PutUint64(b[56:], h.payload)
	return b
}

var (
	errNotSnapshot = errors.New("not a prefix snapshot")
	errReserved    = errors.New("header's reserved bytes are not zero")
)

func decodeHeader(b []byte) (header, error) {
	if len(b) != headerBytes || string(b[:8]) != magic {
		return header{}, errNotSnapshot
	}
	// Bytes 12 to 16 are unused. The checksum covers only what follows the
	// header, and every other field is compared with what was asked, so a
	// bit flipped here would otherwise load unnoticed.
	if binary.LittleEndian.Uint32(b[12:]) != 0 {
		return header{}, errReserved
	}
	var h header
	h.version = binary.LittleEndian.Uint32(b[8:])
	copy(h.model[:], b[16:48])
	h.tokens = binary.LittleEndian.Uint32(b[48:])
	h.crc = binary.LittleEndian.Uint32(b[52:])
	h.payload = binary.LittleEndian.Uint64(b[56:])
	return h, nil
}

// encodeTokens lays tokens out as in a file, little-endian uint32s.
func encodeTokens(tokens []int) []byte {
	b := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(t))
	}
	return b
}

// fileName names the snapshot of model after tokens.
func fileName(model ModelID, tokens []int) string {
	h := sha256.New()
	h.Write(model[:])
	h.Write(encodeTokens(tokens))
	return fmt.Sprintf("%s-%d-%s%s", model.prefix(), len(tokens), hex.EncodeToString(h.Sum(nil))[:tokenNameHex], fileSuffix)
}

// parseName reads a snapshot file's name: its model prefix and token
// count; ok is false for any other name.
func parseName(name string) (model string, tokens int, ok bool) {
	base, found := strings.CutSuffix(name, fileSuffix)
	if !found {
		return "", 0, false
	}
	parts := strings.Split(base, "-")
	if len(parts) != 3 || len(parts[0]) != modelNameHex || len(parts[2]) != tokenNameHex {
		return "", 0, false
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n <= 0 || n > MaxTokens {
		return "", 0, false
	}
	return parts[0], n, true
}
