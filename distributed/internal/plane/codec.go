package plane

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	mp "github.com/vmihailenco/msgpack/v5"
)

// The body of a sealed command or frame (seal.go) is MessagePack, each
// struct encoded as an array of its fields in declaration order (no field
// names on the wire): Command, Frame and what they hold, the engine's
// and the KV index's types included. That layout is the wire format, so
// adding, removing or reordering a field of any of these types changes it
// and must bump WireVersion (seal.go's version byte), which a peer of
// another version then reports by name instead of misreading the body.

// WireVersion is the request plane's wire format: the first byte of every
// sealed message. Version 1 was JSON bodies, one message per command.
const WireVersion = 2

// VersionError is a sealed message of another wire version: a router and
// a worker of different mocker releases.
type VersionError struct {
	Got, Want byte
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("request plane wire version %d from the peer, this process speaks version %d: run routers and workers of the same mocker release", e.Got, e.Want)
}

// IsVersionError reports whether err is a VersionError.
func IsVersionError(err error) bool {
	var v *VersionError
	return errors.As(err, &v)
}

// coder is one encoder and decoder with their buffers, pooled: encoding
// and decoding a message allocates nothing of its own once warm.
type coder struct {
	buf bytes.Buffer
	enc *mp.Encoder
	rd  bytes.Reader
	dec *mp.Decoder
}

var coders = sync.Pool{New: func() any {
	c := &coder{}
	c.enc = mp.NewEncoder(&c.buf)
	c.enc.UseArrayEncodedStructs(true)
	c.dec = mp.NewDecoder(&c.rd)
	return c
}}

// appendBody appends v's encoding to dst.
func appendBody(dst []byte, v any) ([]byte, error) {
	c := coders.Get().(*coder)
	defer coders.Put(c)
	c.buf.Reset()
	if err := c.enc.Encode(v); err != nil {
		return dst, err
	}
	return append(dst, c.buf.Bytes()...), nil
}

func decodeBody(body []byte, v any) error {
	c := coders.Get().(*coder)
	defer coders.Put(c)
	c.rd.Reset(body)
	c.dec.Reset(&c.rd)
	if err := c.dec.Decode(v); err != nil {
		return err
	}
	if c.rd.Len() != 0 {
		return fmt.Errorf("%d bytes after the message", c.rd.Len())
	}
	return nil
}

// EncodeCommand is c's body on the wire.
func EncodeCommand(c *Command) ([]byte, error) { return appendBody(nil, c) }

// DecodeCommand reads a command's body.
func DecodeCommand(body []byte, c *Command) error { return decodeBody(body, c) }

// EncodeFrame is f's body on the wire.
func EncodeFrame(f *Frame) ([]byte, error) { return appendBody(nil, f) }

// DecodeFrame reads a frame's body.
func DecodeFrame(body []byte, f *Frame) error { return decodeBody(body, f) }
