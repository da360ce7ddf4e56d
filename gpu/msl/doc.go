// Package msl is what the drivers that compile Metal Shading Language
// themselves share (the sim as host C++, the cuda driver as CUDA C++): the
// rewrite of what C++ cannot express ([Rewrite], for a driver's [Target])
// and the rules Apple's Metal compiler enforces ([Rules]).
package msl
