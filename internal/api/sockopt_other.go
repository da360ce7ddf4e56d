//go:build !linux && !darwin

package api

import "net"

// limitUnsent does nothing where TCP_NOTSENT_LOWAT is not known: a
// stalled client's socket absorbs what its buffers hold before the
// stream's backlog fills.
func limitUnsent(net.Conn, int) {}
