package msl

import _ "embed"

// Header is a C++ header that a driver's compat header includes by Name.
type Header struct {
	Name, Text string
}

//go:embed msl_types.h
var typesHeader string

//go:embed msl_math.h
var mathHeader string

// Headers are the part of MSL that the sim's metal_compat.h and the cuda
// driver's cuda_compat.h share: the vector types (msl_types.h) and what is
// written the same over either's scalar math (msl_math.h). A driver hands
// them to its compiler beside its own header, under these names, and counts
// their text in its cache keys.
func Headers() []Header {
	return []Header{{Name: "msl_types.h", Text: typesHeader}, {Name: "msl_math.h", Text: mathHeader}}
}
