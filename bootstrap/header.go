package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
)

// Wire constants of protocol version 1. The layout is described in the
// package documentation.
const (
	// Magic opens every header, so a stray client (an HTTP probe, a port
	// scanner, a worker of another protocol) is refused on its first bytes.
	Magic = "MKVT"
	// ProtocolVersion is the only version this package speaks.
	ProtocolVersion uint16 = 1
	// HeaderSize is the exact length of the header a decode client sends.
	HeaderSize = 24
)

// Status is the single byte the server answers once the outcome of a
// transfer is known. The zero value means no answer was received.
type Status byte

// Status bytes. ACK and ABORT keep the values Dynamo's mocker used (0x01,
// 0x02), so a packet capture reads the same.
const (
	// StatusACK: the source finished the transfer; the decode may activate.
	StatusACK Status = 0x01
	// StatusAbort: the source gave up (abort timeout, session timeout,
	// cancellation); the decode must free its reservation and fail.
	StatusAbort Status = 0x02
	// StatusError: the server refused the connection (bad header, unknown
	// or expired transfer id, limits, shutdown). The reason is in the
	// server's log.
	StatusError Status = 0x03
)

// String names the status for logs and error messages.
func (s Status) String() string {
	switch s {
	case 0:
		return "none"
	case StatusACK:
		return "ACK"
	case StatusAbort:
		return "ABORT"
	case StatusError:
		return "ERROR"
	default:
		return fmt.Sprintf("Status(0x%02x)", byte(s))
	}
}

// Header is what a decode client sends right after connecting. Build one
// with NewHeader; the fields are exported so tests and tools can craft
// malformed headers.
type Header struct {
	Version uint16
	// Flags is reserved: version 1 defines no flag, and a server refuses a
	// header with any bit set rather than guess what the client meant.
	Flags uint16
	// TransferID names the room; never 0 (0 means "no transfer").
	TransferID uint64
	// RequestID is the decode side's request id, passed through to
	// Config.OnDecodeArrived so the prefill side can match the handoff.
	RequestID uint64
}

// Header decoding errors; DecodeHeader wraps them with the offending value.
var (
	ErrHeaderLength = errors.New("header has the wrong length")
	ErrBadMagic     = errors.New("bad magic")
	ErrBadVersion   = errors.New("unsupported protocol version")
	ErrBadFlags     = errors.New("unknown header flags")
	ErrZeroTransfer = errors.New("transfer id 0 is reserved for \"no transfer\"")
)

const errHeaderContext = "bootstrap header"

// NewHeader returns a version-1 header for the given transfer and request.
func NewHeader(transferID, requestID uint64) Header {
	return Header{Version: ProtocolVersion, TransferID: transferID, RequestID: requestID}
}

// Append writes the header's HeaderSize bytes to dst and returns the
// extended slice. It writes the fields as they are, valid or not.
func (h Header) Append(dst []byte) []byte {
	dst = append(dst, Magic...)
	dst = binary.LittleEndian.AppendUint16(dst, h.Version)
	dst = binary.LittleEndian.AppendUint16(dst, h.Flags)
	dst = binary.LittleEndian.AppendUint64(dst, h.TransferID)
	return binary.LittleEndian.AppendUint64(dst, h.RequestID)
}

// DecodeHeader parses exactly HeaderSize bytes and checks them: magic,
// version 1, no flags, non-zero transfer id.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) != HeaderSize {
		return Header{}, fmt.Errorf("%s: %w: got %d bytes, want %d", errHeaderContext, ErrHeaderLength, len(b), HeaderSize)
	}
	if string(b[:4]) != Magic {
		return Header{}, fmt.Errorf("%s: %w: got %q, want %q", errHeaderContext, ErrBadMagic, b[:4], Magic)
	}
	h := Header{
		Version:    binary.LittleEndian.Uint16(b[4:6]),
		Flags:      binary.LittleEndian.Uint16(b[6:8]),
		TransferID: binary.LittleEndian.Uint64(b[8:16]),
		RequestID:  binary.LittleEndian.Uint64(b[16:24]),
	}
	if h.Version != ProtocolVersion {
		return Header{}, fmt.Errorf("%s: %w: got %d, this server speaks %d", errHeaderContext, ErrBadVersion, h.Version, ProtocolVersion)
	}
	if h.Flags != 0 {
		return Header{}, fmt.Errorf("%s: %w: 0x%04x (version %d defines none)", errHeaderContext, ErrBadFlags, h.Flags, ProtocolVersion)
	}
	if h.TransferID == 0 {
		return Header{}, fmt.Errorf("%s: %w", errHeaderContext, ErrZeroTransfer)
	}
	return h, nil
}

var transferCounter atomic.Uint64

// NextTransferID returns a new transfer id, unique and increasing within the
// process, starting at 1. Ids are never reused, so a late decode can never
// be mistaken for a newer transfer's.
func NextTransferID() uint64 {
	return transferCounter.Add(1)
}
