package metal

import (
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The ways purego can call C, timed here on a libc function that takes
// objc_msgSend's setBuffer:offset:atIndex: argument count (5 integers):
// why mtl/call_darwin.go uses SyscallN on an argument block it keeps.
//
//	go test -run '^$' -bench PuregoCall ./gpu/metal/

var (
	memcmpFn   uintptr
	callAny    func(a, b uintptr, rest ...any) uintptr // objc.ID.Send's shape
	callTyped  func(a, b, c, d, e uintptr) uintptr
	kept       = &frame{}
	puregoSink uintptr
	puregoArea [8]byte
)

func loadMemcmp(b *testing.B) {
	if memcmpFn != 0 {
		return
	}
	h, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		b.Skipf("no glibc to call: %v", err)
	}
	if memcmpFn, err = purego.Dlsym(h, "memcmp"); err != nil {
		b.Fatal(err)
	}
	purego.RegisterFunc(&callAny, memcmpFn)
	purego.RegisterFunc(&callTyped, memcmpFn)
}

// memcmp(p, p, 0) with two extra arguments, which the C ABI ignores.
func BenchmarkPuregoCall(b *testing.B) {
	loadMemcmp(b)
	p := uintptr(unsafe.Pointer(&puregoArea))
	b.Run("variadic-any", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			puregoSink = callAny(p, p, uint(0), uint(3), uint(4))
		}
	})
	b.Run("registered-typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			puregoSink = callTyped(p, p, 0, 3, 4)
		}
	})
	b.Run("syscalln-fresh-args", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			puregoSink, _, _ = purego.SyscallN(memcmpFn, p, p, 0, 3, 4)
		}
	})
	b.Run("syscalln-kept-block", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			kept[0], kept[1], kept[2], kept[3], kept[4] = p, p, 0, 3, 4
			puregoSink, _, _ = purego.SyscallN(memcmpFn, kept[:5]...)
		}
	})
}
