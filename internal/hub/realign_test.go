package hub

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	strict "github.com/nlpodyssey/safetensors"

	"petal/engine/checkpoint"
	"petal/engine/safetensors"
	"petal/internal/hub/hubtest"
)

// mlxServer serves an MLX-layout copy of the fixture, its data sections
// at dataMod modulo 16.
func mlxServer(t *testing.T, dataMod int) *hubtest.Server {
	h, _ := mlxServerDir(t, dataMod)
	return h
}

// mlxServerDir is mlxServer, with the folder it serves.
func mlxServerDir(t *testing.T, dataMod int) (*hubtest.Server, string) {
	t.Helper()
	src := hubtest.MLXLayout(t, fixture, dataMod)
	h := hubtest.New(t, src)
	first := h.Files["model-00001-of-00003.safetensors"]
	sh, err := safetensors.ParseHeader(first, int64(len(first)))
	if err != nil {
		t.Fatal(err)
	}
	if int(sh.DataOffset%16) != dataMod {
		t.Fatalf("MLX layout put the first shard's data at %d, asked %d mod 16", sh.DataOffset, dataMod)
	}
	return h, src
}

// checkZeroCopy asserts that the GPU backend would bind every tensor of
// dir in place, where it would have copied some of served, the folder as
// MLX wrote it.
func checkZeroCopy(t *testing.T, served, dir string) {
	t.Helper()
	before, err := checkpoint.MisalignedBytes(served)
	if err != nil {
		t.Fatal(err)
	}
	after, err := checkpoint.MisalignedBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GPU copies at load: %d bytes as served, %d as stored", before, after)
	if before == 0 || after != 0 {
		t.Errorf("the GPU backend copies %d bytes of the served folder and %d of the stored one; want some and 0", before, after)
	}
}

// checkStrict opens every stored shard with a reader of the format
// written apart from Petal's (a port of the Rust crate that Python's
// safetensors package wraps: tensors must cover the data section without
// gaps or overlaps) and compares every tensor with the served one.
func checkStrict(t *testing.T, h *hubtest.Server, dir string) {
	t.Helper()
	for name, served := range h.Files {
		if !strings.HasSuffix(name, ".safetensors") {
			continue
		}
		stored, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := strict.Deserialize(stored)
		if err != nil {
			t.Errorf("%s: the strict reader refuses the stored shard: %v", name, err)
			continue
		}
		want, err := strict.Deserialize(served)
		if err != nil {
			t.Fatalf("%s: the strict reader refuses the served shard: %v", name, err)
		}
		if got.Len() != want.Len() {
			t.Errorf("%s: %d tensors, served %d", name, got.Len(), want.Len())
		}
		for _, w := range want.Tensors() {
			g, ok := got.Tensor(w.Name)
			if !ok || g.DType() != w.TensorView.DType() || !slices.Equal(g.Shape(), w.TensorView.Shape()) || !bytes.Equal(g.Data(), w.TensorView.Data()) {
				t.Errorf("%s: %s differs from the served tensor", name, w.Name)
			}
		}
	}
}

// TestStrictReaderRefusesGaps shows why the layout never pads between
// tensors: the strict reader, like Python's safetensors, refuses bytes no
// tensor covers (Petal's own test writer leaves such gaps after a 4-byte
// tensor).
func TestStrictReaderRefusesGaps(t *testing.T) {
	var b bytes.Buffer
	if err := safetensors.Encode(&b, []safetensors.NewTensor{
		{Name: "small", DType: safetensors.BF16, Shape: []int{2}, Data: make([]byte, 4)},
		{Name: "big", DType: safetensors.F32, Shape: []int{4}, Data: make([]byte, 16)},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Deserialize(b.Bytes()); err == nil {
		t.Fatal("the strict reader takes a data section with a gap")
	}
}

// TestPullMLXLayout pulls checkpoints laid out as MLX writes them (no
// header padding, the data at an odd offset, tensors of 3, 4 and 8 bytes
// between big ones) and gets folders whose every tensor is aligned, that
// the GPU backend uses with no copied bytes, that Petal and a strict
// reader of the format both load, and that Verify passes.
func TestPullMLXLayout(t *testing.T) {
	for _, mod := range []int{1, 6, 13} {
		h, served := mlxServerDir(t, mod)
		dir := pullWhole(t, h, options(t, h))
		checkStrict(t, h, dir)
		checkZeroCopy(t, served, dir)
		m, err := readManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Realigned) != 3 {
			t.Errorf("manifest lists %d realigned shards, want 3", len(m.Realigned))
		}
		if err := Verify(dir); err != nil {
			t.Errorf("data at %d mod 16: %v", mod, err)
		}
	}
}

// TestPullMLXResumesAfterCuts cuts one shard's connection inside its
// header and another's inside its data: both resume where they stood.
func TestPullMLXResumesAfterCuts(t *testing.T) {
	h := mlxServer(t, 3)
	h.CutAfter("model-00001-of-00003.safetensors", 1000) // its header is ~8 KB
	h.CutAfter("model-00002-of-00003.safetensors", 100<<10)
	o := options(t, h)
	o.ChunkBytes = 1 << 20 // one chunk a file
	pullWhole(t, h, o)
	// The length, the header and the data are three requests; each cut
	// adds one.
	for _, name := range []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors"} {
		if n := h.Resolves()[name]; n != 4 {
			t.Errorf("%s was asked %d times, want 4", name, n)
		}
	}
}

// TestPullMLXSmallChunks pulls with chunks smaller than a header, so the
// header region spans several chunks and a cut lands inside one of them.
func TestPullMLXSmallChunks(t *testing.T) {
	h := mlxServer(t, 3)
	h.CutAfter("model-00001-of-00003.safetensors", 500)
	o := options(t, h)
	o.ChunkBytes = 3 * MinChunkBytes
	if err := Verify(pullWhole(t, h, o)); err != nil {
		t.Fatal(err)
	}
}

// TestPullMLXResumesAfterStop stops a pull while a shard's header is half
// on disk, and another while a shard's data is, as a crash or a pause
// would; each next pull fetches only the rest.
func TestPullMLXResumesAfterStop(t *testing.T) {
	for _, tc := range []struct {
		what   string
		stall  int64
		inHead bool
	}{{"mid-header", 3000, true}, {"mid-data", 60 << 10, false}} {
		t.Run(tc.what, func(t *testing.T) {
			h := mlxServer(t, 11)
			shard := "model-00001-of-00003.safetensors"
			h.StallAfter(shard, tc.stall)
			o := options(t, h)
			o.Parallel, o.ChunkBytes = 1, 1<<20
			ctx, cancel := context.WithCancelCause(t.Context())
			o.Progress = func(ev Event) {
				if h.Stalled() && ev.Done == h.Served() {
					cancel(ErrPaused)
				}
			}
			if _, err := Pull(ctx, o); !errors.Is(err, ErrPaused) {
				t.Fatalf("stopped pull: %v, want ErrPaused", err)
			}
			checkAbsent(t, o.Dir)
			staging, _ := stagingPaths(o.Dir)
			st := loadState(staging, &Listing{Repo: h.Repo, SHA: hubtest.SHA})
			if st == nil || st.Files[shard] == nil {
				t.Fatal("no resume state for the stopped shard")
			}
			sh, err := safetensors.ParseHeader(h.Files[shard], int64(len(h.Files[shard])))
			if err != nil {
				t.Fatal(err)
			}
			if have := st.Files[shard].Chunks[0]; (have < sh.DataOffset) != tc.inHead || have == 0 {
				t.Fatalf("stopped with %d bytes of a shard whose data starts at %d", have, sh.DataOffset)
			}
			o.Progress = nil
			pullWhole(t, h, o)
		})
	}
}

// TestVerifyRealigned damages a realigned shard in each of its parts:
// every change is found, whether or not it breaks the format.
func TestVerifyRealigned(t *testing.T) {
	h := mlxServer(t, 5)
	dir := pullWhole(t, h, options(t, h))
	shard := filepath.Join(dir, "model-00002-of-00003.safetensors")
	good, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := safetensors.ParseHeader(good, int64(len(good)))
	if err != nil {
		t.Fatal(err)
	}
	js := good[8:sh.DataOffset]
	pad := int64(8 + bytes.LastIndexFunc(js, func(r rune) bool { return r != ' ' }) + 1)
	if pad >= sh.DataOffset {
		t.Fatal("the stored header has no padding to damage")
	}
	for _, tc := range []struct {
		what   string
		damage func([]byte) []byte
	}{
		{"a data byte", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }},
		{"a tensor's offset in the header", func(b []byte) []byte {
			i := bytes.Index(b, []byte(`"data_offsets":[`)) + len(`"data_offsets":[`)
			b[i] ^= 1
			return b
		}},
		{"a padding space (still a valid header)", func(b []byte) []byte { b[pad] = '\t'; return b }},
		{"a byte added", func(b []byte) []byte { return append(b, 0) }},
		{"the last byte cut", func(b []byte) []byte { return b[:len(b)-1] }},
	} {
		if err := os.WriteFile(shard, tc.damage(bytes.Clone(good)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := Verify(dir); !errors.Is(err, ErrChecksum) {
			t.Errorf("%s: Verify says %v, want ErrChecksum", tc.what, err)
		}
	}
	if err := os.WriteFile(shard, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Verify(dir); err != nil {
		t.Fatalf("restored shard: %v", err)
	}
}

// TestPullMLXWrongHash serves a shard with one flipped data byte: the
// hash over the original bytes catches it though the stored bytes are
// placed elsewhere.
func TestPullMLXWrongHash(t *testing.T) {
	h := mlxServer(t, 9)
	shard := "model-00003-of-00003.safetensors"
	h.Corrupt(shard, true)
	o := options(t, h)
	if _, err := Pull(t.Context(), o); !errors.Is(err, ErrChecksum) {
		t.Fatalf("pull of a corrupt shard: %v, want ErrChecksum", err)
	}
	h.Corrupt(shard, false)
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, dir)
}

// synthShard writes a shard of n tensors of 256 KiB with a 4-byte tensor
// after every tenth: as MLX lays it out (unpadded header, the small
// tensors between the big ones), or already aligned (the small tensors
// last, the header padded), which a pull stores as served.
func synthShard(b *testing.B, n int, mlx bool) []byte {
	b.Helper()
	var ts []safetensors.NewTensor
	var small []safetensors.NewTensor
	for i := range n {
		data := make([]byte, 256<<10)
		rand.Read(data)
		ts = append(ts, safetensors.NewTensor{Name: fmt.Sprintf("w%03d", i), DType: safetensors.BF16, Shape: []int{128 << 10}, Data: data})
		if i%10 == 9 {
			s := safetensors.NewTensor{Name: fmt.Sprintf("s%03d", i), DType: safetensors.BF16, Shape: []int{1, 2}, Data: []byte{1, 2, 3, 4}}
			if mlx {
				ts = append(ts, s)
			} else {
				small = append(small, s)
			}
		}
	}
	ts = append(ts, small...)
	header := map[string]any{"__metadata__": map[string]string{"format": "mlx"}}
	var data []byte
	for _, t := range ts {
		header[t.Name] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int{len(data), len(data) + len(t.Data)}}
		data = append(data, t.Data...)
	}
	js, err := json.Marshal(header)
	if err != nil {
		b.Fatal(err)
	}
	for !mlx && (8+len(js))%16 != 0 {
		js = append(js, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	return append(append(out, js...), data...)
}

// BenchmarkPull pulls one 52 MB shard from the fake Hub over loopback:
// laid out as MLX writes it (stored realigned), already aligned (stored
// as served, through the same header-first path), and the same bytes
// under a name that is not a shard (the plain path: no header requests,
// no layout). It reports the bytes stored and, for a realigned shard, the
// bytes its header grew by.
func BenchmarkPull(b *testing.B) {
	for _, bc := range []struct {
		name, file string
		mlx        bool
	}{
		{"layout=mlx", "model.safetensors", true},
		{"layout=aligned", "model.safetensors", false},
		{"layout=opaque", "model.bin", true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			src := b.TempDir()
			shard := synthShard(b, 200, bc.mlx)
			if err := os.WriteFile(filepath.Join(src, bc.file), shard, 0o644); err != nil {
				b.Fatal(err)
			}
			h := hubtest.New(b, src)
			b.SetBytes(int64(len(shard)))
			var stored int64
			for b.Loop() {
				o := Options{
					Endpoint: h.URL(), Repo: h.Repo, Revision: hubtest.SHA, NoHFCache: true,
					Dir: filepath.Join(b.TempDir(), "m"), ChunkBytes: 8 << 20, MaxRetries: 1, RetryBase: time.Millisecond,
					FreeSpace: func(string) (int64, error) { return 1 << 50, nil },
				}
				dir, err := Pull(b.Context(), o)
				if err != nil {
					b.Fatal(err)
				}
				info, err := os.Stat(filepath.Join(dir, bc.file))
				if err != nil {
					b.Fatal(err)
				}
				stored = info.Size()
			}
			b.ReportMetric(float64(stored), "stored-B")
			b.ReportMetric(float64(stored-int64(len(shard))), "grown-B")
		})
	}
}

// memFile is a file in memory for writeRealigned.
type memFile []byte

func (m memFile) WriteAt(p []byte, off int64) (int, error) { return copy(m[off:], p), nil }
func (m memFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m)) {
		return 0, io.EOF
	}
	n := copy(p, m[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// rawShard is a shard with the given JSON header entries, data section
// and header padding (-1: up to a 16-byte boundary), as any writer might
// make one.
func rawShard(entries string, data []byte, pad int) []byte {
	js := "{" + entries + "}" + strings.Repeat(" ", max(pad, 0))
	for pad < 0 && (8+len(js))%16 != 0 {
		js += " "
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	return append(append(out, js...), data...)
}

// TestPlanLayout realigns shards of unusual but valid (or tolerated)
// layouts in one pass, and checks each stored form: every tensor on its
// boundary, the same bytes, and the original rebuilt from it hashing to
// the original's sha256.
func TestPlanLayout(t *testing.T) {
	seq := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + 1)
		}
		return b
	}
	for _, tc := range []struct {
		name     string
		file     []byte
		verbatim bool
	}{
		{"MLX: odd tensors between big ones", rawShard(`"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"b":{"dtype":"F32","shape":[8],"data_offsets":[3,35]},"c":{"dtype":"BF16","shape":[2],"data_offsets":[35,39]},"d":{"dtype":"F32","shape":[4],"data_offsets":[39,55]}`, seq(55), 0), false},
		{"a gap before the first tensor", rawShard(`"a":{"dtype":"F32","shape":[4],"data_offsets":[3,19]},"b":{"dtype":"U8","shape":[1],"data_offsets":[19,20]}`, seq(20), 1), false},
		{"zero-sized tensors", rawShard(`"0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"z":{"dtype":"F32","shape":[2,0],"data_offsets":[18,18]},"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"b":{"dtype":"F32","shape":[4],"data_offsets":[2,18]}`, seq(18), 2), false},
		{"gaps between tensors", rawShard(`"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]},"c":{"dtype":"U8","shape":[5],"data_offsets":[24,29]},"d":{"dtype":"F32","shape":[4],"data_offsets":[32,48]}`, seq(48), 0), false},
		{"bytes after the last tensor", rawShard(`"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"F32","shape":[4],"data_offsets":[6,22]}`, seq(25), 3), false},
		{"no tensors", rawShard(`"__metadata__":{"format":"mlx"}`, nil, 0), false},
		{"already aligned", rawShard(`"b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"a":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]}`, seq(20), -1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig, err := safetensors.ParseHeader(tc.file, int64(len(tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			lay, err := planLayout(tc.file[:orig.DataOffset], int64(len(tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			if lay.verbatim != tc.verbatim {
				t.Errorf("verbatim %v, want %v", lay.verbatim, tc.verbatim)
			}
			stored := make(memFile, lay.size)
			h := sha256.New()
			if _, err := writeRealigned(stored, bytes.NewReader(tc.file[orig.DataOffset:]), lay, h); err != nil {
				t.Fatal(err)
			}
			if tc.verbatim && !bytes.Equal(stored, tc.file) {
				t.Error("a verbatim layout changed the bytes")
			}
			sum := sha256.Sum256(tc.file)
			f := File{Name: "m.safetensors", Size: int64(len(tc.file)), SHA256: hex.EncodeToString(sum[:])}
			if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
				t.Errorf("hashed %s while writing, want %s", got, f.SHA256)
			}
			if ok, err := checkRealigned(stored, lay.size, lay.origHead, headSum(lay.head), f); err != nil || !ok {
				t.Errorf("the stored form does not rebuild the original: %v, %v", ok, err)
			}
			sh, err := safetensors.ParseHeader(stored, lay.size)
			if err != nil {
				t.Fatal(err)
			}
			if sh.DataOffset%16 != 0 {
				t.Errorf("data section at %d", sh.DataOffset)
			}
			for _, ti := range sh.Tensors {
				o := orig.Tensors[slices.IndexFunc(orig.Tensors, func(x safetensors.Info) bool { return x.Name == ti.Name })]
				if !bytes.Equal(stored[sh.DataOffset+ti.Begin:sh.DataOffset+ti.End], tc.file[orig.DataOffset+o.Begin:orig.DataOffset+o.End]) {
					t.Errorf("%s: bytes differ", ti.Name)
				}
				if off := sh.DataOffset + ti.Begin; off%wantAlign(ti.End-ti.Begin) != 0 {
					t.Errorf("%s (%d bytes) at %d", ti.Name, ti.End-ti.Begin, off)
				}
			}
		})
	}
}
