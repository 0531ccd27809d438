package plane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

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
// sealed message. Version 1 was JSON bodies, one message per command;
// version 2 MessagePack, one message per command; version 3 carries the
// commands a router sends one worker in one loop turn as one message, its
// body the commands back to back (AppendCommand, DecodeCommands); version
// 4 has no close_room command (a prefill closes a transfer room itself
// when its hold ends) and adds the disk and object-storage tiers' figures
// to a frame's metrics.
const WireVersion = 4

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

// EncodeCommand is the body of a message of c alone.
func EncodeCommand(c *Command) ([]byte, error) { return appendBody(nil, c) }

// AppendCommand appends c's encoding to a command message's body: the
// body of a message is one or more commands back to back, each one
// array (EncodeMsgpack), so a batch needs no count ahead of it.
func AppendCommand(body []byte, c *Command) ([]byte, error) { return appendBody(body, c) }

// DecodeCommand reads the body of a message of one command.
func DecodeCommand(body []byte, c *Command) error { return decodeBody(body, c) }

// DecodeCommands appends to dst the commands of a message's body, in
// their order: one at least, and nothing but whole commands.
func DecodeCommands(body []byte, dst []Command) ([]Command, error) {
	c := coders.Get().(*coder)
	defer coders.Put(c)
	c.rd.Reset(body)
	c.dec.Reset(&c.rd)
	for {
		var cmd Command
		if err := c.dec.Decode(&cmd); err != nil {
			return dst, err
		}
		dst = append(dst, cmd)
		if c.rd.Len() == 0 {
			return dst, nil
		}
	}
}

// EncodeFrame is f's body on the wire (framecodec.go).
func EncodeFrame(f *Frame) ([]byte, error) {
	c := coders.Get().(*coder)
	defer coders.Put(c)
	c.buf.Reset()
	if err := encodeFrame(c.enc, f); err != nil {
		return nil, err
	}
	return bytes.Clone(c.buf.Bytes()), nil
}

// DecodeFrame reads a frame's body (framecodec.go).
func DecodeFrame(body []byte, f *Frame) error {
	c := coders.Get().(*coder)
	defer coders.Put(c)
	c.rd.Reset(body)
	c.dec.Reset(&c.rd)
	if err := decodeFrame(c.dec, f); err != nil {
		return err
	}
	if c.rd.Len() != 0 {
		return fmt.Errorf("%d bytes after the message", c.rd.Len())
	}
	return nil
}

// commandFields is the length of Command's array on the wire.
const commandFields = 19

// EncodeMsgpack writes c as its array of fields, in declaration order,
// its tokens as one binary field of 4 little-endian bytes each: a
// prompt's thousands of tokens are one copy, not a value apiece.
func (c *Command) EncodeMsgpack(e *mp.Encoder) error {
	errs := [...]error{
		e.EncodeArrayLen(commandFields),
		e.EncodeString(c.Op),
		e.EncodeUint(c.Session),
		e.EncodeUint(c.Seq),
		e.EncodeInt(c.Router),
		e.EncodeUint(c.Ack),
		e.EncodeUint(c.From),
		e.EncodeUint(c.ID),
		encodeTokens(e, c.Tokens),
		e.EncodeInt(int64(c.MaxTokens)),
		e.EncodeInt(int64(c.Priority)),
		e.EncodeBool(c.Hold),
		e.EncodeUint(uint64(c.Outcome)),
		e.EncodeInt(int64(c.N)),
		e.EncodeUint(c.TID),
		e.EncodeBytes(c.Params),
		e.EncodeBool(c.Coupled),
		e.EncodeFloat64(c.At),
		e.EncodeFloat64(c.Until),
		e.EncodeUint(c.Turn),
	}
	return errors.Join(errs[:]...)
}

// DecodeMsgpack reads what EncodeMsgpack wrote.
func (c *Command) DecodeMsgpack(d *mp.Decoder) error {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	if n != commandFields {
		return fmt.Errorf("a command of %d fields, not %d", n, commandFields)
	}
	var maxTokens, priority, nTokens int64
	var outcome uint64
	var params []byte
	dec := [...]func() error{
		func() (err error) { c.Op, err = d.DecodeString(); return },
		func() (err error) { c.Session, err = d.DecodeUint64(); return },
		func() (err error) { c.Seq, err = d.DecodeUint64(); return },
		func() (err error) { c.Router, err = d.DecodeInt64(); return },
		func() (err error) { c.Ack, err = d.DecodeUint64(); return },
		func() (err error) { c.From, err = d.DecodeUint64(); return },
		func() (err error) { c.ID, err = d.DecodeUint64(); return },
		func() (err error) { c.Tokens, err = decodeTokens(d); return },
		func() (err error) { maxTokens, err = d.DecodeInt64(); return },
		func() (err error) { priority, err = d.DecodeInt64(); return },
		func() (err error) { c.Hold, err = d.DecodeBool(); return },
		func() (err error) { outcome, err = d.DecodeUint64(); return },
		func() (err error) { nTokens, err = d.DecodeInt64(); return },
		func() (err error) { c.TID, err = d.DecodeUint64(); return },
		func() (err error) { params, err = d.DecodeBytes(); return },
		func() (err error) { c.Coupled, err = d.DecodeBool(); return },
		func() (err error) { c.At, err = d.DecodeFloat64(); return },
		func() (err error) { c.Until, err = d.DecodeFloat64(); return },
		func() (err error) { c.Turn, err = d.DecodeUint64(); return },
	}
	for _, f := range dec {
		if err := f(); err != nil {
			return err
		}
	}
	if outcome > 0xff {
		return fmt.Errorf("command outcome %d out of range", outcome)
	}
	c.MaxTokens, c.Priority, c.N, c.Outcome = int(maxTokens), int(priority), int(nTokens), uint8(outcome)
	c.Params = nil
	if len(params) > 0 {
		c.Params = params
	}
	return nil
}

func encodeTokens(e *mp.Encoder, tokens []uint32) error {
	if len(tokens) == 0 {
		return e.EncodeNil()
	}
	if err := e.EncodeBytesLen(4 * len(tokens)); err != nil {
		return err
	}
	var b [4 * 256]byte
	for len(tokens) > 0 {
		n := min(len(tokens), 256)
		for i, t := range tokens[:n] {
			binary.LittleEndian.PutUint32(b[4*i:], t)
		}
		if _, err := e.Writer().Write(b[:4*n]); err != nil {
			return err
		}
		tokens = tokens[n:]
	}
	return nil
}

// decodeTokens reads what encodeTokens wrote straight into the one slice
// it returns: no copy of the bytes first. The slice is the command's own
// (a worker's inbox and engine keep a command's tokens for as long as its
// request lives), so it is never a buffer reused for the next message.
func decodeTokens(d *mp.Decoder) ([]uint32, error) {
	n, err := d.DecodeBytesLen()
	if err != nil || n <= 0 { // -1: nil
		return nil, err
	}
	if n%4 != 0 {
		return nil, fmt.Errorf("tokens of %d bytes, not a multiple of 4", n)
	}
	// A length beyond what the message still holds is refused before
	// anything of that size is allocated.
	if r, ok := d.Buffered().(interface{ Len() int }); ok && n > r.Len() {
		return nil, fmt.Errorf("tokens of %d bytes in a message with %d left", n, r.Len())
	}
	tokens := make([]uint32, n/4)
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), n)
	if err := d.ReadFull(b); err != nil {
		return nil, err
	}
	if !littleEndian {
		for i := range tokens {
			tokens[i] = binary.LittleEndian.Uint32(b[4*i:])
		}
	}
	return tokens, nil
}

// littleEndian is whether a token's wire bytes (little-endian) already
// are how this host stores a uint32.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1
