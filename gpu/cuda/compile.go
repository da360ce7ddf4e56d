package cuda

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"petal/gpu"
	"petal/gpu/msl"
)

//go:embed cuda_compat.h
var compatHeader string

// compatName is the name sources include the header by.
const compatName = "petal_cuda_compat.h"

// headers are what NVRTC may include: cuda_compat.h and the petal/gpu/msl
// headers it includes.
var headers = append([]msl.Header{{Name: compatName, Text: compatHeader}}, msl.Headers()...)

// nvrtcOptions are the compile flags besides the architecture; part of each
// module's cache key. --fmad=false keeps a*b+c two roundings, as Metal's
// safe math mode and the sim do (petal/gpu's Math section); division and
// square root are IEEE by default. -lineinfo lets compute-sanitizer name
// kernel lines.
var nvrtcOptions = []string{"--std=c++17", "--fmad=false", "--device-as-default-execution-space", "-lineinfo", "--disable-warnings"}

// maxCompileLog bounds the compiler output kept in an error.
const maxCompileLog = 8 << 10

// compiler is NVRTC for one GPU architecture, with an on-disk cache of
// cubins keyed by the hash of everything that goes into one.
type compiler struct {
	api     *nvrtcAPI
	path    string // the library loaded
	version string // e.g. "12.8"
	arch    string // e.g. "sm_90"
	dir     string // cache directory; "" for none
}

func newCompiler(arch, cacheDir string) (*compiler, error) {
	api, path, err := loadNVRTC()
	if err != nil {
		return nil, err
	}
	var major, minor int32
	if r := api.nvrtcVersion(&major, &minor); r != 0 {
		return nil, fmt.Errorf("%w: nvrtcVersion failed (%d)", ErrNoCompiler, r)
	}
	if cacheDir != "" {
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return nil, fmt.Errorf("cuda: cache directory: %w", err)
		}
	}
	return &compiler{api: api, path: path, version: fmt.Sprintf("%d.%d", major, minor), arch: arch, dir: cacheDir}, nil
}

// source is the translation unit for text (a rewritten kernel source).
func source(text string) string { return fmt.Sprintf("#include %q\n%s", compatName, text) }

// cubin returns the compiled cubin of text, from the cache when it is there.
func (c *compiler) cubin(name, text string) ([]byte, error) {
	src := source(text)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", c.version, c.arch, strings.Join(nvrtcOptions, " "))
	for _, hd := range headers {
		fmt.Fprintf(h, "%s\x00%s\x00", hd.Name, hd.Text)
	}
	h.Write([]byte(src))
	sum := hex.EncodeToString(h.Sum(nil))[:32]
	path := ""
	if c.dir != "" {
		path = filepath.Join(c.dir, sum+".cubin")
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b, nil
		}
	}
	b, err := c.compile(name, src)
	if err != nil {
		return nil, err
	}
	if path != "" {
		// Written under a unique name, then renamed: other processes may
		// compile the same module at once.
		if f, err := os.CreateTemp(c.dir, "build-*.cubin"); err == nil {
			_, werr := f.Write(b)
			if cerr := f.Close(); werr == nil && cerr == nil {
				os.Rename(f.Name(), path)
			} else {
				os.Remove(f.Name())
			}
		}
	}
	return b, nil
}

// compile runs NVRTC on src.
func (c *compiler) compile(name, src string) ([]byte, error) {
	a := c.api
	csrc, cname := cBytes(src), cBytes(name)
	texts := make([]*byte, len(headers))
	names := make([]*byte, len(headers))
	for i, hd := range headers {
		texts[i], names[i] = &cBytes(hd.Text)[0], &cBytes(hd.Name)[0]
	}
	var prog uintptr
	if r := a.nvrtcCreateProgram(&prog, &csrc[0], &cname[0], int32(len(headers)), unsafe.Pointer(&texts[0]), unsafe.Pointer(&names[0])); r != 0 {
		return nil, fmt.Errorf("%w: %s: nvrtcCreateProgram: %s", gpu.ErrCompile, name, cString(a.nvrtcGetErrorString(r)))
	}
	defer a.nvrtcDestroyProgram(&prog)
	opts := append([]string{"--gpu-architecture=" + c.arch}, nvrtcOptions...)
	copts := make([][]byte, len(opts))
	ptrs := make([]*byte, len(opts))
	for i, o := range opts {
		copts[i] = cBytes(o)
		ptrs[i] = &copts[i][0]
	}
	r := a.nvrtcCompileProgram(prog, int32(len(ptrs)), unsafe.Pointer(&ptrs[0]))
	if r != 0 {
		var n uint64
		a.nvrtcGetProgramLogSize(prog, &n)
		log := make([]byte, n+1)
		a.nvrtcGetProgramLog(prog, &log[0])
		text := strings.TrimRight(string(log[:n]), "\x00\n")
		if len(text) > maxCompileLog {
			text = text[:maxCompileLog] + "\n..."
		}
		return nil, fmt.Errorf("%w: %s (NVRTC %s, %s): %s\n%s", gpu.ErrCompile, name, c.version, c.arch, cString(a.nvrtcGetErrorString(r)), text)
	}
	var n uint64
	if r := a.nvrtcGetCUBINSize(prog, &n); r != 0 || n == 0 {
		return nil, fmt.Errorf("%w: %s: no cubin (%s)", gpu.ErrCompile, name, cString(a.nvrtcGetErrorString(r)))
	}
	out := make([]byte, n)
	if r := a.nvrtcGetCUBIN(prog, &out[0]); r != 0 {
		return nil, fmt.Errorf("%w: %s: nvrtcGetCUBIN: %s", gpu.ErrCompile, name, cString(a.nvrtcGetErrorString(r)))
	}
	return out, nil
}
