// Package msl is what the drivers that compile Metal Shading Language
// themselves share (the sim as host C++, the cuda driver as CUDA C++): the
// rewrite of what C++ cannot express ([Rewrite], for a driver's [Target]),
// the rules Apple's Metal compiler enforces ([Rules]), and the C++ headers
// of MSL's vector types and of the math both write alike over their own
// scalar math ([Headers]), which each driver's compat header includes.
package msl
