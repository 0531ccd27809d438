package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// ErrAborted matches (errors.Is) the error Await returns when the source
// aborted the transfer: the decode must free its reservation and fail the
// request as "aborted".
var ErrAborted = errors.New("transfer aborted by source")

// ErrProtocol matches (errors.Is) the error Await returns when the server
// refused the handoff (status ERROR) or answered a byte this version does
// not know.
var ErrProtocol = errors.New("transfer server refused the handoff")

// AbortError is the error for an ABORT answer.
type AbortError struct {
	TransferID uint64
}

// Error reads "transfer N aborted by source".
func (e *AbortError) Error() string {
	// Built by hand: an in-memory cluster reads it once per abort.
	var buf [48]byte
	b := strconv.AppendUint(append(buf[:0], "transfer "...), e.TransferID, 10)
	return string(append(b, " aborted by source"...))
}

// Is makes errors.Is(err, ErrAborted) true.
func (e *AbortError) Is(target error) bool { return target == ErrAborted }

// ProtocolError is the error for an ERROR answer or an unknown status byte.
type ProtocolError struct {
	TransferID uint64
	Addr       string
	Status     Status
}

// Error names the transfer, the server and what it answered.
func (e *ProtocolError) Error() string {
	if e.Status == StatusError {
		return fmt.Sprintf("transfer %d: transfer server %s answered ERROR (unknown or expired transfer id, bad header, limits reached or shutting down; the prefill worker's log says which)", e.TransferID, e.Addr)
	}
	return fmt.Sprintf("transfer %d: transfer server %s answered unknown status byte 0x%02x", e.TransferID, e.Addr, byte(e.Status))
}

// Is makes errors.Is(err, ErrProtocol) true.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

// Await is the decode side of a handoff: it connects to the prefill
// worker's transfer server at addr, sends the header with the transfer's
// token (from the handoff params) and blocks until the server answers.
// Call it once the destination is reserved, because the connection is what
// tells the source to start the transfer. It dials for each call and closes
// after; Client reuses connections instead.
//
// Results: (StatusACK, nil) when the transfer is done; (StatusAbort, err)
// with errors.Is(err, ErrAborted); (StatusError or an unknown byte, err) with
// errors.Is(err, ErrProtocol), which is also the answer to a wrong token;
// (0, err) for dial and I/O failures, and when ctx ends first
// (errors.Is(err, ctx.Err())). Cancelling ctx closes the connection, which
// the server notices at once.
func Await(ctx context.Context, addr string, transferID, requestID uint64, token Token) (Status, error) {
	if transferID == 0 {
		return 0, fmt.Errorf("bootstrap: await: %w", ErrZeroTransfer)
	}
	c, err := dial(ctx, addr, transferID)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	st, _, err := exchange(ctx, c, addr, NewHeader(transferID, requestID, token))
	return st, err
}

func dial(ctx context.Context, addr string, transferID uint64) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("transfer %d: dial transfer server %s: %w", transferID, addr, err)
	}
	return c, nil
}

// exchange sends h on c and reads the answer. answered reports that a
// status byte came back and the connection is still in a known state
// (ctx did not end during the exchange).
func exchange(ctx context.Context, c net.Conn, addr string, h Header) (st Status, answered bool, err error) {
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(pastDeadline) })
	defer func() {
		if !stop() {
			answered = false
		}
	}()
	var buf [HeaderSize]byte
	if _, err := c.Write(h.Append(buf[:0])); err != nil {
		return 0, false, ioError(ctx, h.TransferID, addr, "send header to", err)
	}
	var one [1]byte
	if _, err := io.ReadFull(c, one[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, false, ioError(ctx, h.TransferID, addr, "wait for answer from", err)
	}
	switch st := Status(one[0]); st {
	case StatusACK:
		return st, true, nil
	case StatusAbort:
		return st, true, &AbortError{TransferID: h.TransferID}
	default:
		return st, true, &ProtocolError{TransferID: h.TransferID, Addr: addr, Status: st}
	}
}

func ioError(ctx context.Context, id uint64, addr, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("transfer %d: %s transfer server %s: %w", id, what, addr, ctxErr)
	}
	return fmt.Errorf("transfer %d: %s transfer server %s: %w", id, what, addr, err)
}

// Defaults applied by Client for zero-valued fields.
const (
	DefaultMaxIdlePerAddr = 8
	// DefaultClientIdleTime is half the server's DefaultIdleTimeout, so a
	// kept connection is rarely one the server has just closed.
	DefaultClientIdleTime = DefaultIdleTimeout / 2
)

// Client is the decode side of many handoffs. It asks transfer servers to
// keep its connections open between transfers (FlagKeepAlive) and reuses
// them, so a handoff costs a header and a status byte instead of a TCP
// dial. A connection carries one transfer at a time: concurrent Awaits to
// one server use as many connections, and up to MaxIdlePerAddr of them are
// kept for the next ones.
//
// The zero value is ready to use and safe for concurrent use; Close it to
// drop the kept connections.
type Client struct {
	// MaxIdlePerAddr bounds the connections kept per server address.
	// Default DefaultMaxIdlePerAddr.
	MaxIdlePerAddr int
	// IdleTime bounds how long a connection is kept unused; keep it below
	// the server's IdleTimeout. Default DefaultClientIdleTime.
	IdleTime time.Duration

	mu     sync.Mutex
	idle   map[string][]idleConn
	closed bool
}

type idleConn struct {
	c     net.Conn
	since time.Time
}

// Await is the package-level Await over a kept connection when one is
// available, with the same results. A kept connection the server has closed
// meanwhile (its idle timeout) is noticed on use and replaced by a fresh
// dial; the server had read nothing from it, so retrying is safe.
func (cl *Client) Await(ctx context.Context, addr string, transferID, requestID uint64, token Token) (Status, error) {
	if transferID == 0 {
		return 0, fmt.Errorf("bootstrap: await: %w", ErrZeroTransfer)
	}
	h := NewHeader(transferID, requestID, token)
	h.Flags = FlagKeepAlive
	fresh := false
	for {
		c := cl.take(addr, fresh)
		reused := c != nil
		if !reused {
			var err error
			if c, err = dial(ctx, addr, transferID); err != nil {
				return 0, err
			}
		}
		st, answered, err := exchange(ctx, c, addr, h)
		if !answered && reused && ctx.Err() == nil {
			// A kept connection that died unanswered: the server closed it
			// while idle. Drop it and dial, once.
			_ = c.Close()
			fresh = true
			continue
		}
		if answered && (st == StatusACK || st == StatusAbort) {
			cl.put(addr, c)
		} else {
			_ = c.Close()
		}
		return st, err
	}
}

// take returns a kept connection to addr, or nil (always nil when fresh,
// and then the kept ones are dropped as probably stale too).
func (cl *Client) take(addr string, fresh bool) net.Conn {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	maxIdle := cl.IdleTime
	if maxIdle <= 0 {
		maxIdle = DefaultClientIdleTime
	}
	q := cl.idle[addr]
	var got net.Conn
	for len(q) > 0 && got == nil {
		ic := q[len(q)-1]
		q = q[:len(q)-1]
		if fresh || time.Since(ic.since) >= maxIdle {
			_ = ic.c.Close()
			continue
		}
		got = ic.c
	}
	if len(q) == 0 {
		delete(cl.idle, addr)
	} else {
		cl.idle[addr] = q
	}
	return got
}

func (cl *Client) put(addr string, c net.Conn) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	limit := cl.MaxIdlePerAddr
	if limit <= 0 {
		limit = DefaultMaxIdlePerAddr
	}
	if cl.closed || len(cl.idle[addr]) >= limit {
		_ = c.Close()
		return
	}
	if cl.idle == nil {
		cl.idle = make(map[string][]idleConn)
	}
	cl.idle[addr] = append(cl.idle[addr], idleConn{c: c, since: time.Now()})
}

// Close drops the kept connections. The Client stays usable, without
// keeping connections from then on.
func (cl *Client) Close() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.closed = true
	for _, q := range cl.idle {
		for _, ic := range q {
			_ = ic.c.Close()
		}
	}
	cl.idle = nil
	return nil
}
