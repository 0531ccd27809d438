package bootstrap

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
)

// Wire constants of protocol version 2. The layout is described in the
// package documentation.
const (
	// Magic opens every header, so a stray client (an HTTP probe, a port
	// scanner, a worker of another protocol) is refused on its first bytes.
	Magic = "MKVT"
	// ProtocolVersion is the only version this package speaks. Version 2
	// added the transfer token and the keep-alive flag; a version-1 client
	// is refused, since it cannot prove it was handed the transfer.
	ProtocolVersion uint16 = 2
	// HeaderSize is the exact length of the header a decode client sends.
	HeaderSize = 40
	// TokenSize is the length of a transfer token.
	TokenSize = 16
)

// Header flags. Any bit not defined here is refused.
const (
	// FlagKeepAlive asks the server to keep the connection after the status
	// byte and read the next header from it (see Client). Without it the
	// server closes after answering.
	FlagKeepAlive uint16 = 1 << 0

	knownFlags = FlagKeepAlive
)

// Token is the per-transfer secret a decode presents with its header. The
// prefill's server issues it (Server.Token, and inside the handoff params);
// without it a connection cannot touch the transfer's room.
type Token [TokenSize]byte

// IsZero reports whether t is the zero token, which no server issues.
func (t Token) IsZero() bool { return t == Token{} }

// String is the token in lower-case hex, as it travels in handoff params.
func (t Token) String() string { return hex.EncodeToString(t[:]) }

// MarshalText writes the token as hex, so it travels in JSON as a string.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads a token written by MarshalText.
func (t *Token) UnmarshalText(b []byte) error {
	v, err := ParseToken(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ErrBadToken matches (errors.Is) a token string that is not 32 hex digits.
var ErrBadToken = errors.New("transfer token must be 32 hex digits")

// ParseToken reads a token from its String form.
func ParseToken(s string) (Token, error) {
	var t Token
	if len(s) != 2*TokenSize {
		return Token{}, fmt.Errorf("%w: got %d characters", ErrBadToken, len(s))
	}
	if _, err := hex.Decode(t[:], []byte(s)); err != nil {
		return Token{}, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	return t, nil
}

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
	// Flags holds FlagKeepAlive or nothing; a server refuses a header with
	// any other bit set rather than guess what the client meant.
	Flags uint16
	// TransferID names the room; never 0 (0 means "no transfer").
	TransferID uint64
	// RequestID is the decode side's request id, passed through to
	// Config.OnDecodeArrived so the prefill side can match the handoff.
	RequestID uint64
	// Token is the transfer's secret from the handoff params. The server
	// checks it against the transfer and request ids before the header
	// reaches any room.
	Token Token
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

// NewHeader returns a current-version header for the given transfer,
// request and token, without flags.
func NewHeader(transferID, requestID uint64, token Token) Header {
	return Header{Version: ProtocolVersion, TransferID: transferID, RequestID: requestID, Token: token}
}

// Append writes the header's HeaderSize bytes to dst and returns the
// extended slice. It writes the fields as they are, valid or not.
func (h Header) Append(dst []byte) []byte {
	dst = append(dst, Magic...)
	dst = binary.LittleEndian.AppendUint16(dst, h.Version)
	dst = binary.LittleEndian.AppendUint16(dst, h.Flags)
	dst = binary.LittleEndian.AppendUint64(dst, h.TransferID)
	dst = binary.LittleEndian.AppendUint64(dst, h.RequestID)
	return append(dst, h.Token[:]...)
}

// prefixSize is the length of the magic and version, which a server
// checks before waiting for the rest of a header.
const prefixSize = 6

// checkPrefix checks the magic and version at the start of a header.
func checkPrefix(b []byte) error {
	if string(b[:4]) != Magic {
		return fmt.Errorf("%s: %w: got %q, want %q", errHeaderContext, ErrBadMagic, b[:4], Magic)
	}
	if v := binary.LittleEndian.Uint16(b[4:6]); v != ProtocolVersion {
		return fmt.Errorf("%s: %w: got %d, this server speaks %d", errHeaderContext, ErrBadVersion, v, ProtocolVersion)
	}
	return nil
}

// DecodeHeader parses exactly HeaderSize bytes and checks their form:
// magic, version 2, known flags only, non-zero transfer id. Whether the
// token is right is the server's check, not the decoder's.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) != HeaderSize {
		return Header{}, fmt.Errorf("%s: %w: got %d bytes, want %d", errHeaderContext, ErrHeaderLength, len(b), HeaderSize)
	}
	if err := checkPrefix(b); err != nil {
		return Header{}, err
	}
	h := Header{
		Version:    binary.LittleEndian.Uint16(b[4:6]),
		Flags:      binary.LittleEndian.Uint16(b[6:8]),
		TransferID: binary.LittleEndian.Uint64(b[8:16]),
		RequestID:  binary.LittleEndian.Uint64(b[16:24]),
	}
	copy(h.Token[:], b[24:40])
	if h.Flags&^knownFlags != 0 {
		return Header{}, fmt.Errorf("%s: %w: 0x%04x (version %d defines only 0x%04x)", errHeaderContext, ErrBadFlags, h.Flags, ProtocolVersion, knownFlags)
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
