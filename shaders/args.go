package shaders

import "unsafe"

// Go mirrors of the structs in args.h; field comments are there. A test
// checks sizes and offsets against the C++ build of args.h.

// RMSNormArgs mirrors struct RMSNormArgs.
type RMSNormArgs struct {
	N            int32
	Eps          float32
	WeightOffset float32
	Threads      int32
	RowStride    uint64
	_            uint64
}

// QMVArgs mirrors struct QMVArgs.
type QMVArgs struct {
	Rows    int32
	K       int32
	Experts int32
	_       int32
}

// MoEDownArgs mirrors struct MoEDownArgs.
type MoEDownArgs struct {
	Rows    int32
	K       int32
	Experts int32
	TopK    int32
	SharedK int32
	_       [3]int32
}

// QMVMultiArgs mirrors struct QMVMultiArgs.
type QMVMultiArgs struct {
	K        int32
	Matrices int32
	_        [2]int32
	Rows     [QMVMultiMax]int32
	BlockEnd [QMVMultiMax]int32
}

// ArgmaxArgs mirrors struct ArgmaxArgs.
type ArgmaxArgs struct {
	N        int32
	OutIndex int32
	_        [2]int32
}

// MoEArgs mirrors struct MoEArgs.
type MoEArgs struct {
	N         int32
	K         int32
	Normalize int32
	_         int32
}

// AttnPrepArgs mirrors struct AttnPrepArgs.
type AttnPrepArgs struct {
	Heads     int32
	KVHeads   int32
	HeadDim   int32
	RotaryDim int32
	Pos       int32
	Eps       float32
	_         [2]int32
	InvFreq   [AttnMaxHeadDim / 2]float32
}

// AttnDecodeArgs mirrors struct AttnDecodeArgs.
type AttnDecodeArgs struct {
	N       int32
	Parts   int32
	Heads   int32
	KVHeads int32
	Scale   float32
	PartLen int32
	_       [2]int32
}

// DeltaConvArgs mirrors struct DeltaConvArgs.
type DeltaConvArgs struct {
	Channels int32
	Taps     int32
	_        [2]int32
}

// DeltaStepArgs mirrors struct DeltaStepArgs.
type DeltaStepArgs struct {
	KeyHeads   int32
	ValueHeads int32
	ValueDim   int32
	QScale     float32
	Eps        float32
	Taps       int32
	_          [2]int32
}

// QMMArgs mirrors struct QMMArgs.
type QMMArgs struct {
	Rows    int32
	K       int32
	Tokens  int32
	XDiv    int32
	Experts int32
	_       [3]int32
}

// MoERouteArgs mirrors struct MoERouteArgs.
type MoERouteArgs struct {
	Experts  int32
	Pairs    int32
	Capacity int32
	_        int32
}

// DeltaChunkArgs mirrors struct DeltaChunkArgs.
type DeltaChunkArgs struct {
	Channels int32
	Taps     int32
	Tokens   int32
	_        int32
}

// DeltaScanArgs mirrors struct DeltaScanArgs.
type DeltaScanArgs struct {
	KeyHeads   int32
	ValueHeads int32
	ValueDim   int32
	QScale     float32
	Eps        float32
	Tokens     int32
	Blocks     int32
	_          int32
}

// AttnPrefillArgs mirrors struct AttnPrefillArgs.
type AttnPrefillArgs struct {
	Tokens  int32
	Pos0    int32
	Heads   int32
	KVHeads int32
	Scale   float32
	_       [3]int32
}

// Mixer tiling constants and function-constant bases shared with args.h.
const (
	AttnBlock             = 256
	AttnMaxSplit          = 16
	AttnSplitParts        = 128
	AttnSimdgroups        = 8
	AttnHeadsPerSimdgroup = 2
	AttnMaxHeadDim        = 256
	AttnMaxGroup          = 16
	AttnDecodeThreads     = AttnSimdgroups * 32
	AttnPrepMaxThreads    = 256
	FCAttn                = 600
	DeltaConvThreads      = 256
	DeltaRowsPerThread    = 32
	DeltaMaxSimdgroups    = 32
	DeltaStepMaxThreads   = 512
	FCDelta               = 700
)

// Tiling constants shared with args.h (a test checks they agree).
const (
	RMSNormMaxSimdgroups = 32
	QMVRows              = 4
	QMVSimdgroups        = 2
	QMVThreads           = QMVSimdgroups * 32
	QMVGroupSize         = 64
	QMVWordsPerLane      = 2
	QMVMultiMax          = 4
	QMVRowsMaxTokens     = 8
	MoEMaxExperts        = 512
	MoEMaxTopK           = 16
	RouterThreads        = 32
	ElementwiseThreads   = 256
	ArgmaxUnroll         = 4
	ArgmaxMaxSimdgroups  = 32
)

// Bytes is the in-memory image of an args struct, for gpu.BytesArg. The
// structs hold only fixed-width numbers, so their Go layout is the C one
// (checked by TestArgsLayout).
func Bytes[T RMSNormArgs | QMVArgs | MoEDownArgs | QMVMultiArgs | ArgmaxArgs | MoEArgs | AttnPrepArgs | AttnDecodeArgs | DeltaConvArgs | DeltaStepArgs | QMMArgs | MoERouteArgs | DeltaChunkArgs | DeltaScanArgs | AttnPrefillArgs | SampleArgs | SampleHeader](a *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(a)), unsafe.Sizeof(*a))
}
