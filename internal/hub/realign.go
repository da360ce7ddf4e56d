package hub

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"petal/engine/safetensors"
)

// realignBoundary is what a stored shard's data section starts on, and
// what every tensor whose size is a multiple of it starts on: the widest
// load a kernel makes (float4, uint4).
const realignBoundary = 16

// lenPrefix is the little-endian header length a safetensors file opens
// with.
const lenPrefix = 8

// realigns reports whether f is stored realigned: a safetensors shard
// (its name says so) long enough to have a header.
func realigns(f File) bool {
	return strings.HasSuffix(f.Name, ".safetensors") && f.Size >= lenPrefix
}

// piece is a run of a shard's data section, in the original's order:
// one tensor's bytes, or a gap between tensors (none in a file that follows
// the format, which allows no bytes that no tensor covers). Pieces are
// the units the realigned layout moves.
type piece struct {
	name   string // the tensor's; empty for a gap
	orig   int64  // start in the original data section
	size   int64
	stored int64 // start in the stored data section
}

// layout says where the stored file keeps each byte of the original. The
// original's header region [0, origData) is replaced by head; its data
// section's tensors are packed from the stored data section's start, and
// its gaps follow them in their original order.
type layout struct {
	origData int64
	origHead []byte  // the original's bytes before its data section
	head     []byte  // the stored file's bytes before its data section
	pieces   []piece // in original order, tiling the data section
	size     int64   // of the stored file
	origSize int64
	// verbatim: the original is as aligned as a realigned copy would be,
	// so it is kept byte for byte.
	verbatim bool
}

// storedSize is the size of a realigned shard as stored, 0 for a file
// stored as it is (l nil).
func (l *layout) storedSize() int64 {
	if l == nil {
		return 0
	}
	return l.size
}

// wantAlign is the boundary a tensor of n bytes can always be placed on
// when tensors are packed without gaps: the largest power of two that
// divides n, at most realignBoundary (an empty tensor needs none).
func wantAlign(n int64) int64 {
	if n == 0 {
		return 1
	}
	return min(n&-n, realignBoundary)
}

// alignedFrom reports whether the tensors among pieces, packed in order
// from file offset start, each land on their wantAlign.
func alignedFrom(pieces []piece, start int64) bool {
	pos := start
	for _, p := range pieces {
		if p.name != "" && pos%wantAlign(p.size) != 0 {
			return false
		}
		pos += p.size
	}
	return true
}

// planLayout works out the stored form of a shard of fileSize bytes from
// its original header region (length prefix and JSON header, nothing
// more).
//
// The stored form pads the header with spaces, as the format allows, so
// the data section starts on realignBoundary, and orders the tensors'
// data by decreasing wantAlign, keeping their order within a class: since
// every tensor's size is a multiple of its class, every tensor then lands
// on its class's boundary (16 for every tensor whose size is a multiple of
// 16). Gaps are never inserted: safetensors readers (the Rust crate behind
// Python's safetensors, and its ports) refuse a data section with bytes no
// tensor covers, so zero padding between tensors would make the file
// unreadable to them; a gap the original has is kept after the tensors. A
// shard already laid out that well is kept verbatim.
func planLayout(origHead []byte, fileSize int64) (*layout, error) {
	h, err := safetensors.ParseHeader(origHead, fileSize)
	if err != nil {
		return nil, err
	}
	if int64(len(origHead)) != h.DataOffset {
		return nil, fmt.Errorf("hub: header region of %d bytes, want %d", len(origHead), h.DataOffset)
	}
	l := &layout{origData: h.DataOffset, origHead: slices.Clone(origHead), origSize: fileSize, pieces: piecesOf(h, fileSize)}
	var tensors, gaps []int // indices into l.pieces
	for i, p := range l.pieces {
		if p.name == "" {
			gaps = append(gaps, i)
		} else {
			tensors = append(tensors, i)
		}
	}
	if h.DataOffset%realignBoundary == 0 && len(gaps) == 0 && alignedFrom(l.pieces, h.DataOffset) {
		l.head, l.size, l.verbatim = l.origHead, fileSize, true
		for i := range l.pieces {
			l.pieces[i].stored = l.pieces[i].orig
		}
		return l, nil
	}
	packed := func() []piece {
		out := make([]piece, len(tensors))
		for k, i := range tensors {
			out[k] = l.pieces[i]
		}
		return out
	}
	// The header's padding puts the first tensor on the boundary. Empty
	// tensors go last, where no other tensor starts.
	if !alignedFrom(packed(), 0) {
		sort.SliceStable(tensors, func(a, b int) bool {
			sa, sb := l.pieces[tensors[a]].size, l.pieces[tensors[b]].size
			if (sa == 0) != (sb == 0) {
				return sb == 0
			}
			return wantAlign(sa) > wantAlign(sb)
		})
	}
	pos := int64(0)
	for _, i := range append(slices.Clone(tensors), gaps...) {
		l.pieces[i].stored = pos
		pos += l.pieces[i].size
	}
	js, err := encodeHeader(h, packed())
	if err != nil {
		return nil, err
	}
	for (lenPrefix+int64(len(js)))%realignBoundary != 0 {
		js = append(js, ' ')
	}
	l.head = binary.LittleEndian.AppendUint64(make([]byte, 0, lenPrefix+len(js)), uint64(len(js)))
	l.head = append(l.head, js...)
	l.size = int64(len(l.head)) + pos
	return l, nil
}

// encodeHeader writes the JSON header of the stored form: __metadata__
// first, then the tensors in stored data order, as safetensors' own writer
// orders them.
func encodeHeader(h *safetensors.Header, order []piece) ([]byte, error) {
	byName := make(map[string]safetensors.Info, len(h.Tensors))
	for _, t := range h.Tensors {
		byName[t.Name] = t
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	put := func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		b.Truncate(b.Len() - 1) // Encode's newline
		return nil
	}
	b.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			b.WriteByte(',')
		}
		first = false
	}
	if h.Metadata != nil {
		sep()
		b.WriteString(`"__metadata__":`)
		if err := put(h.Metadata); err != nil {
			return nil, err
		}
	}
	type entry struct {
		DType       safetensors.DType `json:"dtype"`
		Shape       []int             `json:"shape"`
		DataOffsets [2]int64          `json:"data_offsets"`
	}
	for _, s := range order {
		t := byName[s.name]
		sep()
		if err := put(t.Name); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		if err := put(entry{t.DType, shape, [2]int64{s.stored, s.stored + t.End - t.Begin}}); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// piecesOf splits a parsed shard's data section into its tensors and
// the gaps between them, in data order.
func piecesOf(h *safetensors.Header, fileSize int64) []piece {
	ts := slices.Clone(h.Tensors)
	// Zero-sized tensors first at a shared offset.
	sort.SliceStable(ts, func(a, b int) bool {
		if ts[a].Begin != ts[b].Begin {
			return ts[a].Begin < ts[b].Begin
		}
		return ts[a].End < ts[b].End
	})
	var out []piece
	pos := int64(0)
	for _, t := range ts {
		if t.Begin > pos {
			out = append(out, piece{orig: pos, size: t.Begin - pos})
		}
		out = append(out, piece{name: t.Name, orig: t.Begin, size: t.End - t.Begin})
		pos = t.End
	}
	if dataSize := fileSize - h.DataOffset; dataSize > pos {
		out = append(out, piece{orig: pos, size: dataSize - pos})
	}
	return out
}

// place writes p, which the original holds at off (in its data section),
// where the stored file keeps it.
func (l *layout) place(w io.WriterAt, p []byte, off int64) error {
	if off < l.origData || off+int64(len(p)) > l.origSize {
		return fmt.Errorf("hub: bytes [%d, %d) lie outside the data section [%d, %d)", off, off+int64(len(p)), l.origData, l.origSize)
	}
	x := off - l.origData
	for len(p) > 0 {
		// The last piece starting at or before x that holds bytes;
		// zero-sized ones sort before the piece they share an offset with.
		k := sort.Search(len(l.pieces), func(k int) bool { return l.pieces[k].orig > x }) - 1
		s := l.pieces[k]
		n := min(int64(len(p)), s.orig+s.size-x)
		if _, err := w.WriteAt(p[:n], int64(len(l.head))+s.stored+x-s.orig); err != nil {
			return err
		}
		p, x = p[n:], x+n
	}
	return nil
}

// headSum is the sha256 (hex) of a stored file's header region.
func headSum(head []byte) string {
	sum := sha256.Sum256(head)
	return hex.EncodeToString(sum[:])
}

// checkRealigned reports whether r, a stored file of size bytes, is the
// realigned form of f, whose original header region is origHead: the
// stored header region hashes to wantHead, the stored header lists the
// original's tensors, and the original's bytes, read from r in the
// original's order, hash to f's hash from the Hub. It works from the two
// headers alone, so it does not depend on how the order was chosen.
func checkRealigned(r io.ReaderAt, size int64, origHead []byte, wantHead string, f File) (bool, error) {
	orig, err := safetensors.ParseHeader(origHead, f.Size)
	if err != nil || int64(len(origHead)) != orig.DataOffset {
		return false, nil
	}
	head, err := readHeadRegion(r, size)
	if err != nil {
		return false, nil
	}
	if headSum(head) != wantHead {
		return false, nil
	}
	stored, err := safetensors.ParseHeader(head, size)
	if err != nil || len(stored.Tensors) != len(orig.Tensors) {
		return false, nil
	}
	at := make(map[string]safetensors.Info, len(stored.Tensors))
	for _, t := range stored.Tensors {
		at[t.Name] = t
	}
	for _, o := range orig.Tensors {
		if t, ok := at[o.Name]; !ok || t.DType != o.DType || !slices.Equal(t.Shape, o.Shape) {
			return false, nil
		}
	}
	pieces := piecesOf(orig, f.Size)
	var tensorBytes int64
	for _, p := range pieces {
		if p.name != "" {
			tensorBytes += p.size
		}
	}
	// The gaps follow the tensors, in their original order.
	gapAt := stored.DataOffset + tensorBytes
	h, want := hasher(f)
	h.Write(origHead)
	end := gapAt
	for _, p := range pieces {
		off := gapAt
		if p.name == "" {
			gapAt += p.size
		} else {
			off = stored.DataOffset + at[p.name].Begin
		}
		if off+p.size > size {
			return false, nil
		}
		if _, err := io.Copy(h, io.NewSectionReader(r, off, p.size)); err != nil {
			return false, err
		}
		end = max(end, off+p.size)
	}
	return end == size && hex.EncodeToString(h.Sum(nil)) == want, nil
}

// readHeadRegion reads a stored file's length prefix and header.
func readHeadRegion(r io.ReaderAt, size int64) ([]byte, error) {
	end, err := headEnd(r, size)
	if err != nil {
		return nil, err
	}
	head := make([]byte, end)
	if _, err := r.ReadAt(head, 0); err != nil {
		return nil, err
	}
	return head, nil
}

// writeRealigned writes the stored form of a shard to out: the stored
// header region, then the data src gives (the original from the end of its
// header region on), each byte placed once as it is read and fed to h
// after the original header region. It returns the original's bytes seen.
func writeRealigned(out io.WriterAt, src io.Reader, lay *layout, h io.Writer) (int64, error) {
	if _, err := out.WriteAt(lay.head, 0); err != nil {
		return 0, err
	}
	h.Write(lay.origHead)
	n := int64(len(lay.origHead))
	buf := make([]byte, readBuffer)
	src = io.LimitReader(src, lay.origSize-n)
	for {
		m, err := src.Read(buf)
		if m > 0 {
			h.Write(buf[:m])
			if err := lay.place(out, buf[:m], n); err != nil {
				return n, err
			}
			n += int64(m)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
