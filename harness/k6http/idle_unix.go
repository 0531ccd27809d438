//go:build unix

package k6http

import (
	"net"
	"syscall"
)

// idleOK reports whether an idle connection may carry a request: the
// peer has neither closed it nor sent anything since the last response
// (the Transport's reader sees either at once and drops the connection).
// It peeks without blocking.
func idleOK(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	idle := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		idle = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && idle
}
