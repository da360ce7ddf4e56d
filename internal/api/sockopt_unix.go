//go:build linux || darwin

package api

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// limitUnsent sets how many bytes c's socket may queue unsent before a
// write waits (TCP_NOTSENT_LOWAT); 0 restores the system's default. A
// connection without a TCP socket (a test's pipe) is left as it is: its
// writes are then bounded by its own buffers only.
func limitUnsent(c net.Conn, n int) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, n)
	})
}
