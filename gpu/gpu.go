package gpu

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"os"
	"unsafe"
)

// Limits that hold on every Apple GPU Petal supports (Apple7 and later) and
// that the sim enforces too, so a dispatch that works in the sim fits the GPU.
const (
	// MaxThreadsPerThreadgroup is Metal's limit for a compute threadgroup.
	MaxThreadsPerThreadgroup = 1024
	// MaxBindings is the number of buffer argument slots of a kernel.
	MaxBindings = 31
	// MaxInlineBytes is the most data setBytes may carry (Apple's guidance).
	MaxInlineBytes = 4096
	// MaxThreadgroupMemory is the threadgroup memory of one threadgroup on
	// Apple7+ GPUs, static and dynamic together.
	MaxThreadgroupMemory = 32 << 10
	// MaxThreadgroupMemoryBindings is the number of [[threadgroup(n)]] slots
	// the drivers accept.
	MaxThreadgroupMemoryBindings = 8
	// SimdWidth is the simd-group width Petal's kernels assume.
	SimdWidth = 32
	// MinAppleFamily is the oldest Apple GPU family (M1) Petal accepts.
	MinAppleFamily = 7
)

// Errors shared by the drivers; each driver wraps them with what was being
// done to what.
var (
	ErrInvalid     = errors.New("gpu: invalid argument")
	ErrCompile     = errors.New("gpu: kernel compilation failed")
	ErrExecution   = errors.New("gpu: command buffer failed")
	ErrUnsupported = errors.New("gpu: device not supported")
	ErrClosed      = errors.New("gpu: device closed")
)

// Info describes an opened device.
type Info struct {
	Name string
	// AppleFamily is the highest MTLGPUFamilyAppleN the device supports
	// (0 for the sim, which has no family).
	AppleFamily int
	// RecommendedMaxWorkingSetSize is how many bytes the device can use
	// without hurting performance (Metal's recommendedMaxWorkingSetSize);
	// the memory-fit check compares the model's footprint with it.
	RecommendedMaxWorkingSetSize uint64
	// UnifiedMemory reports whether CPU and GPU share memory, so that
	// [Buffer.Contents] is the buffer itself.
	UnifiedMemory bool
}

// Device is an opened GPU, or its simulation. Its methods may be called from
// several goroutines.
type Device interface {
	Info() Info
	// NewBuffer returns a zeroed shared buffer of length bytes.
	NewBuffer(length int) (Buffer, error)
	// WrapNoCopy returns a buffer that kernels only read, whose Contents is
	// mem itself. mem must start on a page boundary (an mmapped region) and
	// stay mapped and unchanged until the buffer is released. The driver
	// may copy mem once, at wrap, and never writes it: Metal and the sim
	// use it in place, the CUDA driver copies it to device memory, which
	// its kernels read. The checkpoint loader wraps each mmapped shard
	// this way.
	WrapNoCopy(mem []byte) (Buffer, error)
	// NewPipeline compiles function from src with the given function
	// constants, or returns the pipeline compiled before for the same
	// [PipelineKey].
	NewPipeline(src Source, function string, constants ...Constant) (Pipeline, error)
	// NewCommandBuffer starts a command buffer holding one concurrent
	// compute pass.
	NewCommandBuffer() (CommandBuffer, error)
	// Close releases the device; buffers and pipelines must not be used
	// afterwards.
	Close() error
}

// Buffer is device memory shared with the CPU.
type Buffer interface {
	// Len is the length in bytes, as asked for.
	Len() int
	// Contents is the buffer's memory. Read it only after the command
	// buffers writing it have completed.
	Contents() []byte
	// Release frees the buffer (for a wrapped one: drops the GPU's view or
	// copy; the caller still owns the mapping). Releasing twice is a no-op.
	Release()
}

// Pipeline is a compiled compute kernel.
type Pipeline interface {
	// Name is the kernel function's name.
	Name() string
	// MaxThreads is the largest threadgroup the pipeline may be dispatched
	// with.
	MaxThreads() int
}

// Source is one self-contained MSL translation unit: local includes already
// expanded (petal/shaders does that), <metal_stdlib> the only system include.
type Source struct {
	// Name names the source in errors and caches, e.g. "qmv.metal".
	Name string
	Text string
}

// ConstantType is the type of a function constant's value.
type ConstantType uint8

// Function constant types, the subset Petal's kernels use.
const (
	Bool ConstantType = iota + 1
	Int32
	Uint32
	Float32
)

func (t ConstantType) String() string {
	switch t {
	case Bool:
		return "bool"
	case Int32:
		return "int"
	case Uint32:
		return "uint"
	case Float32:
		return "float"
	}
	return fmt.Sprintf("ConstantType(%d)", uint8(t))
}

// Constant is the value of the function constant declared with
// [[function_constant(Index)]]. Build one with [BoolConstant],
// [IntConstant], [UintConstant] or [FloatConstant].
type Constant struct {
	Index int
	Type  ConstantType
	// Bits holds the value: 0/1 for Bool, the two's complement for Int32,
	// the IEEE bits for Float32.
	Bits uint32
}

// BoolConstant sets the bool function constant at index.
func BoolConstant(index int, v bool) Constant {
	var b uint32
	if v {
		b = 1
	}
	return Constant{index, Bool, b}
}

// IntConstant sets the int function constant at index.
func IntConstant(index int, v int32) Constant { return Constant{index, Int32, uint32(v)} }

// UintConstant sets the uint function constant at index.
func UintConstant(index int, v uint32) Constant { return Constant{index, Uint32, v} }

// FloatConstant sets the float function constant at index.
func FloatConstant(index int, v float32) Constant {
	return Constant{index, Float32, math.Float32bits(v)}
}

// Literal is the value as a C++/MSL literal.
func (c Constant) Literal() string {
	switch c.Type {
	case Bool:
		if c.Bits != 0 {
			return "true"
		}
		return "false"
	case Int32:
		return fmt.Sprintf("%d", int32(c.Bits))
	case Uint32:
		return fmt.Sprintf("%du", c.Bits)
	case Float32:
		return fmt.Sprintf("__builtin_bit_cast(float, 0x%08xu)", c.Bits)
	}
	return "0"
}

// MaxConstantIndex bounds function constant indices (Metal allows 65535;
// Petal spaces each op's constants by 100 and stays far below).
const MaxConstantIndex = 65535

// CheckConstants reports a duplicate, out-of-range or untyped constant.
func CheckConstants(cs []Constant) error {
	seen := map[int]bool{}
	for _, c := range cs {
		if c.Index < 0 || c.Index > MaxConstantIndex {
			return fmt.Errorf("%w: function constant index %d out of range [0,%d]", ErrInvalid, c.Index, MaxConstantIndex)
		}
		if c.Type < Bool || c.Type > Float32 {
			return fmt.Errorf("%w: function constant %d has no type", ErrInvalid, c.Index)
		}
		if seen[c.Index] {
			return fmt.Errorf("%w: function constant %d given twice", ErrInvalid, c.Index)
		}
		seen[c.Index] = true
	}
	return nil
}

// keySeed seeds the hash of sources in pipeline keys. The keys live only in
// this process's caches, so a per-process seed is fine, and maphash is fast
// enough that hashing a kernel file on every lookup costs little.
var keySeed = maphash.MakeSeed()

// PipelineKey is the cache key of a pipeline: the source's name and a hash
// of its text, the function, and every function constant
// (order-independent), so two specialisations of one kernel never share a
// pipeline. A caller whose names fix their texts (the embedded kernel
// files) passes the name alone, with Text empty, and looks the text up
// only on a miss. Keys are valid within one process.
func PipelineKey(src Source, function string, constants []Constant) string {
	key := fmt.Sprintf("%s:%016x:%s", src.Name, maphash.String(keySeed, src.Text), function)
	byIndex := make(map[int]Constant, len(constants))
	maxIndex := -1
	for _, c := range constants {
		byIndex[c.Index] = c
		maxIndex = max(maxIndex, c.Index)
	}
	for i := 0; i <= maxIndex; i++ {
		if c, ok := byIndex[i]; ok {
			key += fmt.Sprintf(":%d=%s(%d)", i, c.Type, c.Bits)
		}
	}
	return key
}

// CheckNoCopy reports why mem cannot be wrapped without a copy.
func CheckNoCopy(mem []byte) error {
	if len(mem) == 0 {
		return fmt.Errorf("%w: wrapping an empty region", ErrInvalid)
	}
	if addr := uintptr(unsafe.Pointer(&mem[0])); addr%uintptr(os.Getpagesize()) != 0 {
		return fmt.Errorf("%w: no-copy region at %#x is not page-aligned (mmap it)", ErrInvalid, addr)
	}
	return nil
}

// An Uploader copies read-only data into memory of its own, from anywhere
// (mem need not be aligned): the CUDA driver's device memory, where the
// alternative, a shared buffer, would be managed memory that pages
// between host and card.
type Uploader interface {
	Upload(mem []byte) (Buffer, error)
}

// Upload returns a buffer that kernels only read, holding a copy of mem:
// dev's own where it is an Uploader, else a new shared buffer mem is
// copied into. Its Contents is for reading, and may be mem itself (the
// CUDA driver's is), so mem must stay as it is while the buffer lives. A
// device that wraps another by embedding gpu.Device hides the inner
// device's Upload, and gets the copy.
func Upload(dev Device, mem []byte) (Buffer, error) {
	if u, ok := dev.(Uploader); ok {
		return u.Upload(mem)
	}
	b, err := dev.NewBuffer(len(mem))
	if err != nil {
		return nil, err
	}
	copy(b.Contents(), mem)
	return b, nil
}
