//go:build darwin && arm64

package mtl

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// GPUFamily is an MTLGPUFamily.
//
// Reference: https://developer.apple.com/documentation/metal/mtlgpufamily
type GPUFamily int

// GPUFamilyApple1 is MTLGPUFamilyApple1; AppleN is GPUFamilyApple1 + N - 1.
const GPUFamilyApple1 GPUFamily = 1001

// LanguageVersion is an MTLLanguageVersion: major<<16 | minor.
//
// Reference: https://developer.apple.com/documentation/metal/mtllanguageversion
type LanguageVersion uint

// LanguageVersion3_1 is the first version with bfloat.
const LanguageVersion3_1 LanguageVersion = 3<<16 | 1

// MathMode is an MTLMathMode (macOS 15+): which floating-point
// optimisations the compiler may make.
//
// Reference: https://developer.apple.com/documentation/metal/mtlmathmode
type MathMode int

// Math modes. Safe keeps IEEE 754 results; Relaxed may reassociate but
// keeps infinities and NaN; Fast assumes neither occurs.
const (
	MathModeSafe    MathMode = 0
	MathModeRelaxed MathMode = 1
	MathModeFast    MathMode = 2
)

// MathFloatingPointFunctions is an MTLMathFloatingPointFunctions (macOS
// 15+): which variant of the fp32 math functions (exp, sin...) plain calls
// get.
//
// Reference: https://developer.apple.com/documentation/metal/mtlmathfloatingpointfunctions
type MathFloatingPointFunctions int

// Function variants.
const (
	MathFloatingPointFunctionsFast    MathFloatingPointFunctions = 0
	MathFloatingPointFunctionsPrecise MathFloatingPointFunctions = 1
)

// ResourceOptions is an MTLResourceOptions bit set.
//
// Reference: https://developer.apple.com/documentation/metal/mtlresourceoptions
type ResourceOptions uint

// ResourceStorageModeShared: memory shared by CPU and GPU.
const ResourceStorageModeShared ResourceOptions = 0

// DispatchType is an MTLDispatchType.
//
// Reference: https://developer.apple.com/documentation/metal/mtldispatchtype
type DispatchType uint

// DispatchTypeConcurrent lets the dispatches of an encoder overlap.
const DispatchTypeConcurrent DispatchType = 1

// BarrierScope is an MTLBarrierScope.
//
// Reference: https://developer.apple.com/documentation/metal/mtlbarrierscope
type BarrierScope uint

// BarrierScopeBuffers orders accesses to buffers.
const BarrierScopeBuffers BarrierScope = 1

// DataType is an MTLDataType (the scalar ones function constants use).
//
// Reference: https://developer.apple.com/documentation/metal/mtldatatype
type DataType uint

// Scalar data types.
const (
	DataTypeFloat DataType = 3
	DataTypeInt   DataType = 29
	DataTypeUInt  DataType = 33
	DataTypeBool  DataType = 53
)

// CommandBufferStatus is an MTLCommandBufferStatus.
//
// Reference: https://developer.apple.com/documentation/metal/mtlcommandbufferstatus
type CommandBufferStatus uint

// Command buffer states.
const (
	CommandBufferStatusNotEnqueued CommandBufferStatus = 0
	CommandBufferStatusEnqueued    CommandBufferStatus = 1
	CommandBufferStatusCommitted   CommandBufferStatus = 2
	CommandBufferStatusScheduled   CommandBufferStatus = 3
	CommandBufferStatusCompleted   CommandBufferStatus = 4
	CommandBufferStatusError       CommandBufferStatus = 5
)

// Size is an MTLSize.
//
// Reference: https://developer.apple.com/documentation/metal/mtlsize
type Size struct {
	Width, Height, Depth uint
}

// Classes are looked up in init, after their frameworks are loaded.
var (
	class_NSString                  objc.Class
	class_NSURL                     objc.Class
	class_MTLCompileOptions         objc.Class
	class_MTLFunctionConstantValues objc.Class
)

var (
	sel_new                                                 = objc.RegisterName("new")
	sel_release                                             = objc.RegisterName("release")
	sel_retain                                              = objc.RegisterName("retain")
	sel_alloc                                               = objc.RegisterName("alloc")
	sel_initWithUTF8String                                  = objc.RegisterName("initWithUTF8String:")
	sel_UTF8String                                          = objc.RegisterName("UTF8String")
	sel_localizedDescription                                = objc.RegisterName("localizedDescription")
	sel_name                                                = objc.RegisterName("name")
	sel_supportsFamily                                      = objc.RegisterName("supportsFamily:")
	sel_recommendedMaxWorkingSetSize                        = objc.RegisterName("recommendedMaxWorkingSetSize")
	sel_hasUnifiedMemory                                    = objc.RegisterName("hasUnifiedMemory")
	sel_newCommandQueue                                     = objc.RegisterName("newCommandQueue")
	sel_newLibraryWithSource_options_error                  = objc.RegisterName("newLibraryWithSource:options:error:")
	sel_newLibraryWithURL_error                             = objc.RegisterName("newLibraryWithURL:error:")
	sel_fileURLWithPath                                     = objc.RegisterName("fileURLWithPath:")
	sel_maxBufferLength                                     = objc.RegisterName("maxBufferLength")
	sel_setLanguageVersion                                  = objc.RegisterName("setLanguageVersion:")
	sel_respondsToSelector                                  = objc.RegisterName("respondsToSelector:")
	sel_setMathMode                                         = objc.RegisterName("setMathMode:")
	sel_mathMode                                            = objc.RegisterName("mathMode")
	sel_setMathFloatingPointFunctions                       = objc.RegisterName("setMathFloatingPointFunctions:")
	sel_mathFloatingPointFunctions                          = objc.RegisterName("mathFloatingPointFunctions")
	sel_setFastMathEnabled                                  = objc.RegisterName("setFastMathEnabled:")
	sel_fastMathEnabled                                     = objc.RegisterName("fastMathEnabled")
	sel_setConstantValue_type_atIndex                       = objc.RegisterName("setConstantValue:type:atIndex:")
	sel_newFunctionWithName_constantValues_error            = objc.RegisterName("newFunctionWithName:constantValues:error:")
	sel_newComputePipelineStateWithFunction_error           = objc.RegisterName("newComputePipelineStateWithFunction:error:")
	sel_maxTotalThreadsPerThreadgroup                       = objc.RegisterName("maxTotalThreadsPerThreadgroup")
	sel_newBufferWithLength_options                         = objc.RegisterName("newBufferWithLength:options:")
	sel_newBufferWithBytesNoCopy_length_options_deallocator = objc.RegisterName("newBufferWithBytesNoCopy:length:options:deallocator:")
	sel_contents                                            = objc.RegisterName("contents")
	sel_commandBuffer                                       = objc.RegisterName("commandBuffer")
	sel_computeCommandEncoderWithDispatchType               = objc.RegisterName("computeCommandEncoderWithDispatchType:")
	sel_setComputePipelineState                             = objc.RegisterName("setComputePipelineState:")
	sel_setBuffer_offset_atIndex                            = objc.RegisterName("setBuffer:offset:atIndex:")
	sel_setBufferOffset_atIndex                             = objc.RegisterName("setBufferOffset:atIndex:")
	sel_setBuffers_offsets_withRange                        = objc.RegisterName("setBuffers:offsets:withRange:")
	sel_setBytes_length_atIndex                             = objc.RegisterName("setBytes:length:atIndex:")
	sel_setThreadgroupMemoryLength_atIndex                  = objc.RegisterName("setThreadgroupMemoryLength:atIndex:")
	sel_dispatchThreadgroups_threadsPerThreadgroup          = objc.RegisterName("dispatchThreadgroups:threadsPerThreadgroup:")
	sel_memoryBarrierWithScope                              = objc.RegisterName("memoryBarrierWithScope:")
	sel_endEncoding                                         = objc.RegisterName("endEncoding")
	sel_commit                                              = objc.RegisterName("commit")
	sel_waitUntilCompleted                                  = objc.RegisterName("waitUntilCompleted")
	sel_status                                              = objc.RegisterName("status")
	sel_error                                               = objc.RegisterName("error")
)

var (
	createSystemDefaultDevice func() objc.ID
	loadErr                   error
)

// ErrNoMetal is returned when the Metal framework or a device is missing.
var ErrNoMetal = errors.New("mtl: Metal is not available")

// Frameworks loaded at init: Foundation for NSString; CoreGraphics because
// without it MTLCreateSystemDefaultDevice returns nil in a command-line
// process; Metal itself.
const (
	foundationPath     = "/System/Library/Frameworks/Foundation.framework/Foundation"
	coreGraphicsPath   = "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics"
	metalFrameworkPath = "/System/Library/Frameworks/Metal.framework/Metal"
)

func init() {
	var metal uintptr
	for _, path := range []string{foundationPath, coreGraphicsPath, metalFrameworkPath} {
		h, err := purego.Dlopen(path, purego.RTLD_LAZY|purego.RTLD_GLOBAL)
		if err != nil {
			loadErr = fmt.Errorf("%w: %v", ErrNoMetal, err)
			return
		}
		metal = h
	}
	purego.RegisterLibFunc(&createSystemDefaultDevice, metal, "MTLCreateSystemDefaultDevice")
	class_NSString = objc.GetClass("NSString")
	class_NSURL = objc.GetClass("NSURL")
	class_MTLCompileOptions = objc.GetClass("MTLCompileOptions")
	class_MTLFunctionConstantValues = objc.GetClass("MTLFunctionConstantValues")
	if class_NSString == 0 || class_NSURL == 0 || class_MTLCompileOptions == 0 || class_MTLFunctionConstantValues == 0 {
		loadErr = fmt.Errorf("%w: Foundation or Metal classes missing", ErrNoMetal)
		return
	}
	libobjc, err := purego.Dlopen("/usr/lib/libobjc.A.dylib", purego.RTLD_LAZY|purego.RTLD_GLOBAL)
	if err != nil {
		loadErr = fmt.Errorf("%w: %v", ErrNoMetal, err)
		return
	}
	for _, f := range []struct {
		addr *uintptr
		name string
	}{{&msgSendFn, "objc_msgSend"}, {&poolPush, "objc_autoreleasePoolPush"}, {&poolPop, "objc_autoreleasePoolPop"}} {
		if *f.addr, err = purego.Dlsym(libobjc, f.name); err != nil {
			loadErr = fmt.Errorf("%w: %v", ErrNoMetal, err)
			return
		}
	}
}

// WithPool runs f on a locked OS thread inside an autorelease pool, which
// Objective-C needs to free autoreleased results (command buffers,
// encoders, strings) when no run loop drains a pool for us.
func WithPool(f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var a Args
	pool := PoolPush()
	defer PoolPop(&a, pool)
	f()
}

// nsString returns an owned NSString; release it.
func nsString(s string) objc.ID {
	return objc.ID(class_NSString).Send(sel_alloc).Send(sel_initWithUTF8String, s+"\x00")
}

// nsError turns an NSError into a Go error (nil for nil).
func nsError(e objc.ID) error {
	if e == 0 {
		return nil
	}
	return errors.New(objc.Send[string](e.Send(sel_localizedDescription), sel_UTF8String))
}

// Object is any owned Objective-C object.
type Object struct{ ID objc.ID }

// Release drops the reference this value owns.
//
// Reference: https://developer.apple.com/documentation/objectivec/1418956-nsobject/1571957-release
func (o Object) Release() {
	if o.ID != 0 {
		o.ID.Send(sel_release)
	}
}

// Device is an id<MTLDevice>.
//
// Reference: https://developer.apple.com/documentation/metal/mtldevice
type Device struct{ Object }

// CreateSystemDefaultDevice returns the default GPU (owned).
//
// Reference: https://developer.apple.com/documentation/metal/1433401-mtlcreatesystemdefaultdevice
func CreateSystemDefaultDevice() (Device, error) {
	if loadErr != nil {
		return Device{}, loadErr
	}
	id := createSystemDefaultDevice()
	if id == 0 {
		return Device{}, fmt.Errorf("%w: MTLCreateSystemDefaultDevice returned nil", ErrNoMetal)
	}
	return Device{Object{id}}, nil
}

// Name is the GPU's name.
//
// Reference: https://developer.apple.com/documentation/metal/mtldevice/1433359-name
func (d Device) Name() string {
	return objc.Send[string](d.ID.Send(sel_name), sel_UTF8String)
}

// SupportsFamily reports whether the GPU has the family's features.
//
// Reference: https://developer.apple.com/documentation/metal/mtldevice/3143473-supportsfamily
func (d Device) SupportsFamily(f GPUFamily) bool {
	return objc.Send[bool](d.ID, sel_supportsFamily, int(f))
}

// RecommendedMaxWorkingSetSize is how much memory the GPU can use without
// hurting performance.
//
// Reference: https://developer.apple.com/documentation/metal/mtldevice/2369280-recommendedmaxworkingsetsize
func (d Device) RecommendedMaxWorkingSetSize() uint64 {
	return objc.Send[uint64](d.ID, sel_recommendedMaxWorkingSetSize)
}

// HasUnifiedMemory reports whether CPU and GPU share memory.
//
// Reference: https://developer.apple.com/documentation/metal/mtldevice/3229025-hasunifiedmemory
func (d Device) HasUnifiedMemory() bool { return objc.Send[bool](d.ID, sel_hasUnifiedMemory) }

// MaxBufferLength is the largest buffer the GPU can make, in bytes.
//
// Reference: https://developer.apple.com/documentation/metal/mtldevice/2966563-maxbufferlength
func (d Device) MaxBufferLength() uint64 { return objc.Send[uint64](d.ID, sel_maxBufferLength) }

// NewLibraryWithURL loads a compiled .metallib file (owned result; call it
// inside a pool).
//
// Reference: https://developer.apple.com/documentation/metal/mtldevice/2877425-newlibrarywithurl
func (d Device) NewLibraryWithURL(path string) (Library, error) {
	p := nsString(path)
	defer Object{p}.Release()
	url := objc.ID(class_NSURL).Send(sel_fileURLWithPath, p)
	var errID objc.ID
	id := d.ID.Send(sel_newLibraryWithURL_error, url, unsafe.Pointer(&errID))
	if id == 0 {
		if err := nsError(errID); err != nil {
			return Library{}, err
		}
		return Library{}, fmt.Errorf("mtl: newLibraryWithURL(%s) returned nil", path)
	}
	return Library{Object{id}}, nil
}

// NewCommandQueue returns an owned command queue.
//
// Reference: https://developer.apple.com/documentation/metal/mtldevice/1433388-newcommandqueue
func (d Device) NewCommandQueue() (CommandQueue, error) {
	id := d.ID.Send(sel_newCommandQueue)
	if id == 0 {
		return CommandQueue{}, errors.New("mtl: newCommandQueue returned nil")
	}
	return CommandQueue{Object{id}}, nil
}

// NewLibraryWithSource compiles MSL source with opts (owned result).
//
// Reference: https://developer.apple.com/documentation/metal/mtldevice/1433431-newlibrarywithsource
func (d Device) NewLibraryWithSource(source string, opts CompileOptions) (Library, error) {
	src := nsString(source)
	defer Object{src}.Release()
	var errID objc.ID
	id := d.ID.Send(sel_newLibraryWithSource_options_error, src, opts.ID, unsafe.Pointer(&errID))
	if id == 0 {
		if err := nsError(errID); err != nil {
			return Library{}, err
		}
		return Library{}, errors.New("mtl: newLibraryWithSource returned nil")
	}
	return Library{Object{id}}, nil
}

// NewComputePipelineStateWithFunction builds a pipeline (owned).
//
// Reference: https://developer.apple.com/documentation/metal/mtldevice/1433395-newcomputepipelinestatewithfunct
func (d Device) NewComputePipelineStateWithFunction(f Function) (ComputePipelineState, error) {
	var errID objc.ID
	id := d.ID.Send(sel_newComputePipelineStateWithFunction_error, f.ID, unsafe.Pointer(&errID))
	if id == 0 {
		if err := nsError(errID); err != nil {
			return ComputePipelineState{}, err
		}
		return ComputePipelineState{}, errors.New("mtl: newComputePipelineStateWithFunction returned nil")
	}
	return ComputePipelineState{Object{id}}, nil
}

// CompileOptions is an MTLCompileOptions.
//
// Reference: https://developer.apple.com/documentation/metal/mtlcompileoptions
type CompileOptions struct{ Object }

// NewCompileOptions returns default options (owned).
func NewCompileOptions() CompileOptions {
	return CompileOptions{Object{objc.ID(class_MTLCompileOptions).Send(sel_new)}}
}

// SetLanguageVersion selects the MSL version.
//
// Reference: https://developer.apple.com/documentation/metal/mtlcompileoptions/1515494-languageversion
func (o CompileOptions) SetLanguageVersion(v LanguageVersion) {
	o.ID.Send(sel_setLanguageVersion, uint(v))
}

// HasMathMode reports whether this OS has mathMode and
// mathFloatingPointFunctions (macOS 15+); older ones have only
// fastMathEnabled.
//
// Reference: https://developer.apple.com/documentation/objectivec/1418956-nsobject/1418583-respondstoselector
func (o CompileOptions) HasMathMode() bool {
	return objc.Send[bool](o.ID, sel_respondsToSelector, sel_setMathMode) &&
		objc.Send[bool](o.ID, sel_respondsToSelector, sel_setMathFloatingPointFunctions)
}

// SetMathMode sets the floating-point optimisations allowed (macOS 15+).
//
// Reference: https://developer.apple.com/documentation/metal/mtlcompileoptions/mathmode
func (o CompileOptions) SetMathMode(m MathMode) { o.ID.Send(sel_setMathMode, int(m)) }

// MathMode is the mode set (macOS 15+).
func (o CompileOptions) MathMode() MathMode { return MathMode(objc.Send[int](o.ID, sel_mathMode)) }

// SetMathFloatingPointFunctions selects the fp32 math function variant
// (macOS 15+).
//
// Reference: https://developer.apple.com/documentation/metal/mtlcompileoptions/mathfloatingpointfunctions
func (o CompileOptions) SetMathFloatingPointFunctions(f MathFloatingPointFunctions) {
	o.ID.Send(sel_setMathFloatingPointFunctions, int(f))
}

// MathFloatingPointFunctions is the variant set (macOS 15+).
func (o CompileOptions) MathFloatingPointFunctions() MathFloatingPointFunctions {
	return MathFloatingPointFunctions(objc.Send[int](o.ID, sel_mathFloatingPointFunctions))
}

// SetFastMathEnabled is macOS 14's switch (deprecated from 15, where it sets
// mathMode and mathFloatingPointFunctions together).
//
// Reference: https://developer.apple.com/documentation/metal/mtlcompileoptions/1515914-fastmathenabled
func (o CompileOptions) SetFastMathEnabled(on bool) { o.ID.Send(sel_setFastMathEnabled, on) }

// FastMathEnabled reports the switch.
func (o CompileOptions) FastMathEnabled() bool { return objc.Send[bool](o.ID, sel_fastMathEnabled) }

// Library is an id<MTLLibrary>.
//
// Reference: https://developer.apple.com/documentation/metal/mtllibrary
type Library struct{ Object }

// LibraryOf is the library whose id is lib (petal/gpu/metal keeps ids).
func LibraryOf(lib uintptr) Library { return Library{Object{objc.ID(lib)}} }

// NewFunctionWithConstants specialises a function (owned result).
//
// Reference: https://developer.apple.com/documentation/metal/mtllibrary/1640020-newfunctionwithname
func (l Library) NewFunctionWithConstants(name string, values FunctionConstantValues) (Function, error) {
	n := nsString(name)
	defer Object{n}.Release()
	var errID objc.ID
	id := l.ID.Send(sel_newFunctionWithName_constantValues_error, n, values.ID, unsafe.Pointer(&errID))
	if id == 0 {
		if err := nsError(errID); err != nil {
			return Function{}, err
		}
		return Function{}, fmt.Errorf("mtl: no function %q", name)
	}
	return Function{Object{id}}, nil
}

// Function is an id<MTLFunction>.
//
// Reference: https://developer.apple.com/documentation/metal/mtlfunction
type Function struct{ Object }

// FunctionConstantValues is an MTLFunctionConstantValues.
//
// Reference: https://developer.apple.com/documentation/metal/mtlfunctionconstantvalues
type FunctionConstantValues struct{ Object }

// NewFunctionConstantValues returns an empty, owned set.
func NewFunctionConstantValues() FunctionConstantValues {
	return FunctionConstantValues{Object{objc.ID(class_MTLFunctionConstantValues).Send(sel_new)}}
}

// SetConstantValue sets the constant at index; value points at the
// 4-byte (or 1-byte bool) value, which Metal copies.
//
// Reference: https://developer.apple.com/documentation/metal/mtlfunctionconstantvalues/1639538-setconstantvalue
func (v FunctionConstantValues) SetConstantValue(value unsafe.Pointer, t DataType, index uint) {
	v.ID.Send(sel_setConstantValue_type_atIndex, value, uint(t), index)
}

// ComputePipelineState is an id<MTLComputePipelineState>.
//
// Reference: https://developer.apple.com/documentation/metal/mtlcomputepipelinestate
type ComputePipelineState struct{ Object }

// MaxTotalThreadsPerThreadgroup is the largest threadgroup it can run.
//
// Reference: https://developer.apple.com/documentation/metal/mtlcomputepipelinestate/1414927-maxtotalthreadsperthreadgroup
func (p ComputePipelineState) MaxTotalThreadsPerThreadgroup() int {
	return int(objc.Send[uint](p.ID, sel_maxTotalThreadsPerThreadgroup))
}

// Buffer is an id<MTLBuffer>.
//
// Reference: https://developer.apple.com/documentation/metal/mtlbuffer
type Buffer struct{ Object }

// Contents is the CPU address of a shared buffer.
//
// Reference: https://developer.apple.com/documentation/metal/mtlbuffer/1515716-contents
func (b Buffer) Contents() unsafe.Pointer {
	return objc.Send[unsafe.Pointer](b.ID, sel_contents)
}

// CommandQueue is an id<MTLCommandQueue>.
//
// Reference: https://developer.apple.com/documentation/metal/mtlcommandqueue
type CommandQueue struct{ Object }

// CommandBuffer is an id<MTLCommandBuffer>.
//
// Reference: https://developer.apple.com/documentation/metal/mtlcommandbuffer
type CommandBuffer struct{ Object }

// Error is the execution error, nil if none.
//
// Reference: https://developer.apple.com/documentation/metal/mtlcommandbuffer/1443040-error
func (c CommandBuffer) Error() error { return nsError(c.ID.Send(sel_error)) }
