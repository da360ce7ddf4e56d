//go:build unix

// These tests run real processes over one folder: the test binary started
// again as a helper (TestHelperProcess). They hold on Unix, where a file
// removed or renamed over stays readable through a descriptor opened
// before; Windows refuses both while the file is open.

package prefixdisk

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The helper process's environment.
const (
	helperRole = "PETAL_PREFIXDISK_HELPER"
	helperDir  = "PETAL_PREFIXDISK_DIR"
	helperSeed = "PETAL_PREFIXDISK_SEED"
)

// The killed writer's snapshots.
const (
	// killChunk is how much of a payload is written at a time; each chunk
	// holds its snapshot's length and its own index, so a chunk of another
	// snapshot or out of place is found.
	killChunk = 64 << 10
	// killPayload is a snapshot's size, large enough that a write (and its
	// sync) lasts while the parent notices the temporary file.
	killPayload = 8 << 20
	// killBudget keeps a few whole snapshots beside the one being written.
	killBudget = 4 * killPayload
	// killAttempts bounds the kills tried until one lands during a write
	// rather than between two.
	killAttempts = 10
	// pollEvery and pollFor bound the parent's watch of the folder.
	pollEvery = 2 * time.Millisecond
	pollFor   = 2 * time.Minute
)

// The two sharing processes' snapshots.
const (
	shareLengths = 24       // token counts 1..shareLengths
	shareRounds  = 150      // saves and loads each process makes
	shareBase    = 32 << 10 // a payload's size is shareBase + n KiB
	// shareBudget holds about six snapshots, so both processes evict.
	shareBudget = 6 * (shareBase + shareLengths<<10)
)

// TestHelperProcess is the child of the tests below; it does nothing unless
// one of them started it.
func TestHelperProcess(t *testing.T) {
	var err error
	switch os.Getenv(helperRole) {
	case "":
		return
	case "kill-writer":
		err = killWriter(os.Getenv(helperDir))
	case "sharer":
		err = sharer(os.Getenv(helperDir), os.Getenv(helperSeed))
	default:
		err = fmt.Errorf("unknown role %q", os.Getenv(helperRole))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// helper returns the test binary started again as role over dir.
func helper(t *testing.T, role, dir string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperRole+"="+role, helperDir+"="+dir)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// killChunkData is chunk i of the payload of the snapshot of n tokens.
func killChunkData(n, i int) []byte {
	b := make([]byte, killChunk)
	for j := 0; j < len(b); j += 8 {
		binary.LittleEndian.PutUint64(b[j:], uint64(n)<<32|uint64(i))
	}
	return b
}

// killWriter writes ever longer snapshots of model A until it is killed.
func killWriter(dir string) error {
	s, err := Open(dir, killBudget, func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
	if err != nil {
		return err
	}
	for n := 1; ; n++ {
		write := func(w io.Writer) error {
			for i := range killPayload / killChunk {
				if _, err := w.Write(killChunkData(n, i)); err != nil {
					return err
				}
			}
			return nil
		}
		released := make(chan struct{})
		if !s.Save(modelA, seq(n), write, func() { close(released) }) {
			return fmt.Errorf("snapshot of %d tokens dropped", n)
		}
		<-released
	}
}

// loadKilled reads a killed writer's payload, refusing any chunk out of
// place.
func loadKilled(r io.Reader, n int) (blob, error) {
	closed := false
	b := make([]byte, killChunk)
	for i := range killPayload / killChunk {
		if _, err := io.ReadFull(r, b); err != nil {
			return blob{closed: &closed}, err
		}
		if !bytes.Equal(b, killChunkData(n, i)) {
			return blob{closed: &closed}, fmt.Errorf("chunk %d is not the snapshot of %d tokens'", i, n)
		}
	}
	return blob{closed: &closed}, nil
}

// temps lists the temporary files in dir.
func temps(t *testing.T, dir string) map[string]bool {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tempPrefix) {
			out[de.Name()] = true
		}
	}
	return out
}

// TestKillDuringWrite: a writer killed (SIGKILL) during a write leaves only
// whole snapshots, each with its checksum and its tokens; its temporary
// file is never loaded, kept while young and removed once stale.
func TestKillDuringWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prefix")
	midWrite := false
	for attempt := 0; attempt < killAttempts && !midWrite; attempt++ {
		before := temps(t, dir)
		cmd := helper(t, "kill-writer", dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill once this writer has finished a snapshot and is writing the
		// next one: a temporary file of its own is in the folder.
		writing := func() bool {
			entries, _ := List(dir)
			for name := range temps(t, dir) {
				if !before[name] && len(entries) > 0 {
					return true
				}
			}
			return false
		}
		tick := time.NewTicker(pollEvery)
		deadline := time.After(pollFor)
	watch:
		for !writing() {
			select {
			case <-tick.C:
			case <-deadline:
				break watch
			}
		}
		tick.Stop()
		if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatal(err)
		}
		err := cmd.Wait()
		if exit, ok := err.(*exec.ExitError); !ok || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the writer ended before it was killed: %v\n%s", err, stderr.Bytes())
		}
		if !writing() {
			t.Logf("attempt %d: the kill landed between two writes", attempt)
			continue
		}
		midWrite = true
		t.Logf("attempt %d: killed during a write", attempt)
	}
	if !midWrite {
		t.Fatalf("in %d attempts no kill landed during a write", killAttempts)
	}
	left := temps(t, dir)
	entries, err := List(dir)
	if err != nil || len(entries) == 0 || len(left) == 0 {
		t.Fatalf("after the kill: %d snapshots, %d temporary files, %v", len(entries), len(left), err)
	}

	s, l := open(t, dir, 1<<40)
	longest := 0
	for _, e := range entries {
		checkFile(t, filepath.Join(dir, e.Name), seq(e.Tokens))
		longest = max(longest, e.Tokens)
	}
	// Every length the writer may have been writing, the killed one among
	// them, loads whole or not at all.
	loaded := 0
	for n := 1; n <= longest+1; n++ {
		_, got := Load(s, modelA, seq(n), n-1, loadKilled)
		if got != 0 {
			loaded++
		}
		if _, err := os.Stat(filepath.Join(dir, fileName(modelA, seq(n)))); (got == n) != (err == nil) {
			t.Errorf("%d tokens: loaded %d, its file: %v", n, got, err)
		}
	}
	if st := s.Stats(); loaded != len(entries) || st.Rejected != 0 {
		t.Errorf("loaded %d of %d snapshots; stats %+v; log %q", loaded, len(entries), st, l.text())
	}
	s.Close()
	if got := temps(t, dir); len(got) != len(left) {
		t.Errorf("young temporary files removed: %v, were %v", got, left)
	}

	old := time.Now().Add(-StaleTemp - time.Minute)
	for name := range left {
		if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	open(t, dir, 1<<40)
	if got := temps(t, dir); len(got) != 0 {
		t.Errorf("stale temporary files kept: %v", got)
	}
	if after, _ := List(dir); len(after) != len(entries) {
		t.Errorf("removing the temporary files took snapshots: %d of %d left", len(after), len(entries))
	}
}

// checkFile reads a snapshot as the format says, without the package's
// reader: its header, its tokens and the CRC-32C of all after the header.
func checkFile(t *testing.T, path string, tokens []int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < headerBytes+4*len(tokens) || string(data[:8]) != magic {
		t.Fatalf("%s: %d bytes, not a snapshot", filepath.Base(path), len(data))
	}
	le := binary.LittleEndian
	if le.Uint32(data[48:]) != uint32(len(tokens)) || le.Uint64(data[56:]) != uint64(len(data)-headerBytes-4*len(tokens)) {
		t.Errorf("%s: header's counts %d tokens, %d bytes", filepath.Base(path), le.Uint32(data[48:]), le.Uint64(data[56:]))
	}
	if got := crc32.Checksum(data[headerBytes:], crc32.MakeTable(crc32.Castagnoli)); got != le.Uint32(data[52:]) {
		t.Errorf("%s: checksum %08x, header says %08x", filepath.Base(path), got, le.Uint32(data[52:]))
	}
	for i, tok := range tokens {
		if got := int(le.Uint32(data[headerBytes+4*i:])); got != tok {
			t.Fatalf("%s: token %d is %d, not %d", filepath.Base(path), i, got, tok)
		}
	}
}

// sharePayload is the snapshot of n tokens of the sharing processes.
func sharePayload(n int) []byte {
	return bytes.Repeat([]byte{byte(n), byte(n >> 8), 0xa5, byte(n * 31)}, (shareBase+n<<10)/4)
}

func loadShared(r io.Reader, n int) (blob, error) {
	closed := false
	data, err := io.ReadAll(r)
	if err == nil && !bytes.Equal(data, sharePayload(n)) {
		err = fmt.Errorf("payload of %d bytes is not the snapshot of %d tokens'", len(data), n)
	}
	return blob{data: data, closed: &closed}, err
}

// sharer saves and loads random snapshots of model A in dir, beside another
// sharer, once the parent says go on its stdin. Every log line but a load's
// is an error; it prints its counts.
func sharer(dir, seed string) error {
	var l logBuf
	s, err := Open(dir, shareBudget, l.logf)
	if err != nil {
		return err
	}
	n, err := strconv.ParseUint(seed, 10, 64)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(n, 1))
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	for range shareRounds {
		n := 1 + rng.IntN(shareLengths)
		data := sharePayload(n)
		released := make(chan struct{})
		if !s.Save(modelA, seq(n), func(w io.Writer) error { _, err := w.Write(data); return err }, func() { close(released) }) {
			return fmt.Errorf("snapshot of %d tokens dropped", n)
		}
		// Loads run while this process writes and evicts, and the other
		// does; a payload not its snapshot's is deleted and logged. One
		// write at a time, so Save never drops.
		for written := false; !written; {
			Load(s, modelA, seq(1+rng.IntN(shareLengths)), 0, loadShared)
			select {
			case <-released:
				written = true
			default:
			}
		}
	}
	s.Close()
	var errs []string
	for _, line := range l.lines {
		if !strings.HasPrefix(line, "prefix cache on disk: loaded ") {
			errs = append(errs, line)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("logged:\n%s", strings.Join(errs, "\n"))
	}
	st := s.Stats()
	fmt.Printf("hits %d misses %d writes %d rejected %d\n", st.Hits, st.Misses, st.Writes, st.Rejected)
	return nil
}

// TestTwoProcessesShareAFolder: two processes saving, loading and evicting
// the same snapshots in one folder over a tight budget log no error, load
// only whole snapshots, and leave every file whole and the folder within
// the budget.
func TestTwoProcessesShareAFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prefix")
	type child struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
		lines          *bufio.Reader
		stdin          io.WriteCloser
	}
	children := make([]*child, 2)
	for i := range children {
		c := &child{cmd: helper(t, "sharer", dir, helperSeed+"="+strconv.Itoa(i+1))}
		c.cmd.Stderr = &c.stderr
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		c.lines = bufio.NewReader(out)
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	// Both have opened the folder before either starts.
	for _, c := range children {
		if line, err := c.lines.ReadString('\n'); line != "ready\n" {
			t.Fatalf("helper said %q: %v\n%s", line, err, c.stderr.Bytes())
		}
	}
	for _, c := range children {
		c.stdin.Write([]byte("go\n"))
		c.stdin.Close()
	}
	writes := 0
	for i, c := range children {
		io.Copy(&c.stdout, c.lines)
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("process %d: %v\n%s", i, err, c.stderr.Bytes())
			continue
		}
		var hits, misses, w, rejected int
		if _, err := fmt.Sscanf(c.stdout.String(), "hits %d misses %d writes %d rejected %d", &hits, &misses, &w, &rejected); err != nil || rejected != 0 {
			t.Errorf("process %d said %q: %v", i, c.stdout.String(), err)
		}
		t.Logf("process %d: %d hits, %d misses, %d writes", i, hits, misses, w)
		writes += w
	}

	entries, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Eviction ran: far more was written than the folder holds.
	if writes < 2*len(entries) {
		t.Errorf("%d writes for %d files left", writes, len(entries))
	}
	if left := temps(t, dir); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	s, l := open(t, dir, 1<<40)
	var total int64
	for _, e := range entries {
		total += e.Bytes
		if _, got := Load(s, modelA, seq(e.Tokens), e.Tokens-1, loadShared); got != e.Tokens {
			t.Errorf("%s: loaded %d tokens", e.Name, got)
		}
	}
	if total > shareBudget {
		t.Errorf("%d bytes left, over the budget of %d", total, shareBudget)
	}
	if st := s.Stats(); st.Rejected != 0 {
		t.Errorf("stats %+v, log %q", st, l.text())
	}
}
