//go:build !unix

package k6http

import "net"

// idleOK cannot peek here: a connection the peer closed is found when the
// request fails, and a request that may be repeated is (roundTripDirect).
func idleOK(net.Conn) bool { return true }
