package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
	return fmt.Sprintf("transfer %d aborted by source", e.TransferID)
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
// worker's transfer server at addr, sends the header and blocks until the
// server answers. Call it once the destination is reserved, because the
// connection is what tells the source to start the transfer.
//
// Results: (StatusACK, nil) when the transfer is done; (StatusAbort, err)
// with errors.Is(err, ErrAborted); (StatusError or an unknown byte, err) with
// errors.Is(err, ErrProtocol); (0, err) for dial and I/O failures, and when
// ctx ends first (errors.Is(err, ctx.Err())). Cancelling ctx closes the
// connection, which the server notices at once.
func Await(ctx context.Context, addr string, transferID, requestID uint64) (Status, error) {
	if transferID == 0 {
		return 0, fmt.Errorf("bootstrap: await: %w", ErrZeroTransfer)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("transfer %d: dial transfer server %s: %w", transferID, addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(pastDeadline) })
	defer stop()

	var buf [HeaderSize]byte
	if _, err := c.Write(NewHeader(transferID, requestID).Append(buf[:0])); err != nil {
		return 0, ioError(ctx, transferID, addr, "send header to", err)
	}
	var one [1]byte
	if _, err := io.ReadFull(c, one[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, ioError(ctx, transferID, addr, "wait for answer from", err)
	}
	switch st := Status(one[0]); st {
	case StatusACK:
		return st, nil
	case StatusAbort:
		return st, &AbortError{TransferID: transferID}
	default:
		return st, &ProtocolError{TransferID: transferID, Addr: addr, Status: st}
	}
}

func ioError(ctx context.Context, id uint64, addr, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("transfer %d: %s transfer server %s: %w", id, what, addr, ctxErr)
	}
	return fmt.Errorf("transfer %d: %s transfer server %s: %w", id, what, addr, err)
}
