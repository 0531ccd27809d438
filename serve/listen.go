package serve

import (
	"fmt"
	"net"

	"golang.org/x/net/netutil"
)

// DefaultMaxConns bounds the connections a server from Listen serves at
// once. Each costs a goroutine and its buffers (tens of KB), so the bound
// keeps a flood of clients (10,000 at once, say) from growing the process
// without limit: past it, connections wait in the kernel's backlog until
// one closes, and are served then.
const DefaultMaxConns = 4096

// Listen opens addr for a Server's Handler, serving at most maxConns
// connections at once (0: DefaultMaxConns).
func Listen(addr string, maxConns int) (net.Listener, error) {
	if maxConns < 0 {
		return nil, fmt.Errorf("max connections: want 0 (the default, %d) or more, got %d", DefaultMaxConns, maxConns)
	}
	if maxConns == 0 {
		maxConns = DefaultMaxConns
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, maxConns), nil
}
