// Package metal is the gpu driver for the Mac's GPU: Metal through purego
// and the Objective-C runtime (petal/gpu/metal/mtl), no cgo.
//
// # What it does
//
// [Open] refuses macOS before 14 (MSL 3.1 arrived with it; the version is
// kern.osproductversion), takes the system default device, refuses GPUs
// older than Apple7 (M1) and makes one command queue. Pipelines are compiled
// from MSL source at MSL 3.1 (bfloat needs it) with fast math off (safe math
// mode and precise functions on macOS 15+, fastMathEnabled = NO on 14; see
// petal/gpu) and function constants, cached by gpu.PipelineKey; libraries
// are cached per source, and a library Petal.app bundles (built by
// scripts/macapp.sh from the very source text, library.go) is loaded
// instead of compiling when its hash matches, and dropped for the source
// if it cannot make a pipeline; [Device.Libraries] says which. Buffers are shared (zeroed on creation, since Metal does not
// promise it) or no-copy views of mmapped checkpoint shards; a shard longer
// than the device's maxBufferLength is wrapped as overlapping views with
// every tensor inside one (views.go, gpu.WrapTensors). A command buffer
// holds one compute encoder of MTLDispatchTypeConcurrent, with
// memoryBarrierWithScope(buffers) for gpu.CommandBuffer.Barrier; after
// completion its status and error are checked. Any number of goroutines
// may wait on one command buffer: the first waits on the GPU, the others
// until it has settled.
//
// # Host cost
//
// The buffers and command buffers (device.go, encode.go) build on every
// platform: their Objective-C calls go through a table of typed functions
// (calls.go) that the darwin build fills with purego calls on an argument
// block each command buffer keeps, and tests fill with counting stand-ins.
// Encoding a dispatch allocates nothing and sends only the bindings that
// changed, a run of slots in one call; a settled command buffer handed
// back with gpu.Recycle is reused by the next NewCommandBuffer (a few are
// kept per device), so a whole decode step allocates nothing.
// BenchmarkDecodeStep35B replays the 35B decode step into it and reports
// the calls a step makes.
//
// # Threads and pools
//
// Every call that may create autoreleased objects (making a command buffer
// and its encoder, committing, reading an error, compiling) runs in an
// autorelease pool on a locked OS thread; dispatches and barriers create
// none and open none. Objects kept past the call are retained and released
// by their owner.
//
// Metal itself is reached only on darwin/arm64; elsewhere [Open] returns
// gpu.ErrUnsupported, and only the tests run the driver, over stand-ins.
package metal
