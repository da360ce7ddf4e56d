//go:build !(darwin && arm64)

package doctor

// appleFamily is nil off Apple silicon Macs: there is no Metal GPU to read,
// and the Metal driver's Open says so.
var appleFamily func() (string, int, error)
