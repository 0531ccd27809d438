package k6http

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// A VU's plain http:// requests skip net/http's Transport. The Transport
// runs a reader and a writer goroutine per connection and hands every
// request and response across them: on a busy host those hand-offs and
// wake-ups cost about as much CPU as the exchange itself. A VU makes one
// request at a time (http.batch aside), so its plain-HTTP/1.1 exchanges
// are written and read on the goroutine that makes them, over keep-alive
// connections the VU keeps (conns). The request is written and the
// response read by net/http's own Request.Write and ReadResponse, and the
// Transport's rules are kept: 1xx responses skipped, a request that met
// a keep-alive connection the server had closed retried on a new one when
// it may be, a connection kept or dropped as the Transport would. HTTPS
// (HTTP/2 by ALPN), protocol upgrades, headers the Transport refuses and
// noConnectionReuse go through the Transport.

// conns are a VU's idle plain-HTTP connections, by host:port, most
// recently used last (so reused first, as the Transport does).
type conns struct {
	mu   sync.Mutex
	idle map[string][]*directConn
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// As the Transport's MaxIdleConnsPerHost and IdleConnTimeout (newTransport).
const (
	maxIdlePerHost = 100
	idleTimeout    = 90 * time.Second
)

// directConn is one connection of conns.
type directConn struct {
	cc     *countingConn
	br     *bufio.Reader // reads through lim
	lim    limitedConn
	bw     *bufio.Writer
	key    string
	idleAt time.Time
	// stop ends the watch on the request's context (which interrupts the
	// connection's reads and writes when it ends); false when it ended.
	stop func() bool
}

// get returns an idle connection to key, or nil.
func (p *conns) get(key string, now time.Time) *directConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[key]
	for len(list) > 0 {
		dc := list[len(list)-1]
		list[len(list)-1] = nil
		list = list[:len(list)-1]
		if now.Sub(dc.idleAt) < idleTimeout {
			p.idle[key] = list
			return dc
		}
		_ = dc.cc.Close()
	}
	delete(p.idle, key)
	return nil
}

// put keeps dc for the next request to its host, or closes it when the
// host has enough idle connections.
func (p *conns) put(dc *directConn, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[dc.key]
	if len(list) >= maxIdlePerHost {
		_ = dc.cc.Close()
		return
	}
	// Connections that idled past the timeout go first (oldest first).
	for len(list) > 0 && now.Sub(list[0].idleAt) >= idleTimeout {
		_ = list[0].cc.Close()
		list = list[1:]
	}
	dc.idleAt = now
	if p.idle == nil {
		p.idle = map[string][]*directConn{}
	}
	p.idle[dc.key] = append(list, dc)
}

// closeIdle closes every idle connection.
func (p *conns) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, list := range p.idle {
		for _, dc := range list {
			_ = dc.cc.Close()
		}
	}
	p.idle = nil
}

// direct reports whether req goes out on the VU's own connections.
func direct(req *http.Request) bool {
	if req.URL.Scheme != "http" || !ascii(req.URL.Host) {
		return false // (the Transport dials a non-ASCII host by its IDNA form)
	}
	for k, vv := range req.Header {
		// The Transport refuses these with an error of its own; an
		// upgrade hands the connection over, which these do not.
		if !httpguts.ValidHeaderFieldName(k) || http.CanonicalHeaderKey(k) == "Upgrade" {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}

// staleAfter is how long a connection may idle before a request checks
// it (see roundTripDirect); a replayable request on a connection used more
// recently is sent again should the server have closed it.
const staleAfter = time.Second

// roundTripDirect sends req on one of the VU's connections (a new one if
// none is idle) and reads the response's head; the body is the caller's
// to read, and then release's to settle. The phases land in tr.
func (c *Client) roundTripDirect(b *budget, req *http.Request, tr *tracer) (*http.Response, *directConn, error) {
	key := canonicalAddr(req)
	for {
		if err := b.parent.Err(); err != nil {
			return nil, nil, context.Cause(b.parent)
		}
		now := time.Now()
		dc := c.conns.get(key, now)
		// A request that may not be repeated (and any after a long idle,
		// when a server may have sent a 408 before closing) checks first
		// that the server has not closed the connection meanwhile: the
		// Transport's reader would have seen it.
		if dc != nil && (!replayable(req) || now.Sub(dc.idleAt) > staleAfter) && !idleOK(dc.cc.Conn) {
			_ = dc.cc.Close()
			continue
		}
		reused := dc != nil
		if dc == nil {
			if tr.connStart.IsZero() {
				tr.connStart = now
			}
			conn, err := c.conns.dial(b.context(), "tcp", key)
			tr.connDone = time.Now()
			if err != nil {
				if e := b.cut(); e != nil {
					err = e
				}
				return nil, nil, err
			}
			cc, _ := conn.(*countingConn)
			dc = &directConn{cc: cc, bw: bufio.NewWriter(cc), key: key}
			dc.lim.r = cc
			dc.br = bufio.NewReader(&dc.lim)
			now = tr.connDone
		}
		tr.gotConn = now
		tr.conn, tr.remote = dc.cc, dc.cc.remote
		tr.sent0, tr.recv0 = 0, 0
		if reused {
			tr.sent0, tr.recv0 = dc.cc.sent.Load(), dc.cc.recv.Load()
		}
		_ = dc.cc.SetDeadline(b.deadline)
		cc := dc.cc
		dc.stop = context.AfterFunc(b.parent, func() { _ = cc.SetDeadline(aLongTimeAgo) })

		err := req.Write(dc.bw)
		if err == nil {
			err = dc.bw.Flush()
		}
		tr.wrote = time.Now()
		var resp *http.Response
		if err == nil {
			// The response's head may be no longer than the Transport
			// allows; its body is bounded by the deadline only.
			dc.lim.n = maxHeaderBytes
			if _, err = dc.br.Peek(1); err == nil {
				tr.firstByte = time.Now()
				resp, err = readFinal(dc.br, req)
				if err != nil {
					if dc.lim.n <= 0 {
						err = fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", maxHeaderBytes)
					}
					// As the Transport words it.
					err = fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", err)
				}
			}
			dc.lim.n = math.MaxInt64
		}
		if err == nil {
			return resp, dc, nil
		}
		dc.stop()
		_ = dc.cc.Close()
		if e := b.cut(); e != nil {
			return nil, nil, e
		}
		// A keep-alive connection the server closed in the meantime
		// fails before the response begins: the Transport retries such
		// a request on a new connection when it may be repeated.
		if reused && tr.firstByte.IsZero() && replayable(req) {
			if req.GetBody != nil {
				if req.Body, err = req.GetBody(); err != nil {
					return nil, nil, err
				}
			}
			continue
		}
		return nil, nil, err
	}
}

// maxHeaderBytes bounds a response's head, as the Transport's default
// MaxResponseHeaderBytes does.
const maxHeaderBytes = 10 << 20

// limitedConn reads at most n more bytes from r.
type limitedConn struct {
	r io.Reader
	n int64
}

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeadTooLong
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

var errHeadTooLong = fmt.Errorf("read limit of %d bytes exhausted", maxHeaderBytes)

// readFinal reads responses until the final one: 1xx are skipped but
// 101, as the Transport does.
func readFinal(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

// release settles a direct exchange once its body was read (err is the
// reading's): the connection goes back to the VU when both sides keep it
// alive and the exchange ended cleanly, and is closed otherwise.
func (c *Client) release(dc *directConn, req *http.Request, resp *http.Response, err error) {
	watched := dc.stop()
	// As with the Transport, a Connection: close header the script set
	// does not keep the connection from being reused; the server
	// closing it does (a later request finds it closed).
	if err != nil || !watched || resp.Close || req.Close || resp.StatusCode == http.StatusSwitchingProtocols {
		_ = dc.cc.Close()
		return
	}
	c.conns.put(dc, time.Now())
}

// replayable reports whether req may be sent again, by the Transport's
// rule: an idempotent method, or a key saying the request is.
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// canonicalAddr is req's host:port, the port made explicit.
func canonicalAddr(req *http.Request) string {
	host, port := req.URL.Hostname(), req.URL.Port()
	if port != "" {
		return req.URL.Host // already host:port ([host]:port for IPv6)
	}
	port = "80"
	if strings.IndexByte(host, ':') >= 0 {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// aLongTimeAgo is a deadline that has passed: setting it interrupts a
// connection's blocked reads and writes.
var aLongTimeAgo = time.Unix(1, 0)

// budget is the time a request (its redirects and digest answer
// included) may take: the VU's context, cut short by the request's
// timeout.
type budget struct {
	parent   context.Context
	deadline time.Time // zero: no timeout
	ctx      context.Context
	cancel   context.CancelFunc
}

// context is parent with the deadline, made when first needed (the
// direct path needs none unless it dials).
func (b *budget) context() context.Context {
	if b.ctx == nil {
		b.ctx = b.parent
		if !b.deadline.IsZero() {
			b.ctx, b.cancel = context.WithDeadlineCause(b.parent, b.deadline, errTimeout)
		}
	}
	return b.ctx
}

// cut returns the error that ended an exchange early: the parent ended,
// or the timeout ran out; nil when neither.
func (b *budget) cut() error {
	if b.parent.Err() != nil {
		return context.Cause(b.parent)
	}
	if !b.deadline.IsZero() && !time.Now().Before(b.deadline) {
		return errTimeout
	}
	return nil
}

func (b *budget) done() {
	if b.cancel != nil {
		b.cancel()
	}
}
