package plane

import "encoding/binary"

// msgpack is the few MessagePack encodings Dynamo's event plane needs
// (Dynamo's event plane, whose one implemented codec it is): maps
// with string keys, strings, unsigned integers, arrays, binary and nil,
// written by hand so that each envelope's layout is spelled out here (the
// request plane's bodies use a library: codec.go).
type msgpack struct{ b []byte }

func (e *msgpack) nil() { e.b = append(e.b, 0xc0) }

func (e *msgpack) uint(v uint64) {
	switch {
	case v < 0x80:
		e.b = append(e.b, byte(v))
	case v <= 0xff:
		e.b = append(e.b, 0xcc, byte(v))
	case v <= 0xffff:
		e.b = binary.BigEndian.AppendUint16(append(e.b, 0xcd), uint16(v))
	case v <= 0xffffffff:
		e.b = binary.BigEndian.AppendUint32(append(e.b, 0xce), uint32(v))
	default:
		e.b = binary.BigEndian.AppendUint64(append(e.b, 0xcf), v)
	}
}

func (e *msgpack) str(s string) {
	n := len(s)
	switch {
	case n < 32:
		e.b = append(e.b, 0xa0|byte(n))
	case n <= 0xff:
		e.b = append(e.b, 0xd9, byte(n))
	case n <= 0xffff:
		e.b = binary.BigEndian.AppendUint16(append(e.b, 0xda), uint16(n))
	default:
		e.b = binary.BigEndian.AppendUint32(append(e.b, 0xdb), uint32(n))
	}
	e.b = append(e.b, s...)
}

func (e *msgpack) bin(p []byte) {
	n := len(p)
	switch {
	case n <= 0xff:
		e.b = append(e.b, 0xc4, byte(n))
	case n <= 0xffff:
		e.b = binary.BigEndian.AppendUint16(append(e.b, 0xc5), uint16(n))
	default:
		e.b = binary.BigEndian.AppendUint32(append(e.b, 0xc6), uint32(n))
	}
	e.b = append(e.b, p...)
}

func (e *msgpack) array(n int) {
	switch {
	case n < 16:
		e.b = append(e.b, 0x90|byte(n))
	case n <= 0xffff:
		e.b = binary.BigEndian.AppendUint16(append(e.b, 0xdc), uint16(n))
	default:
		e.b = binary.BigEndian.AppendUint32(append(e.b, 0xdd), uint32(n))
	}
}

func (e *msgpack) mapN(n int) {
	switch {
	case n < 16:
		e.b = append(e.b, 0x80|byte(n))
	case n <= 0xffff:
		e.b = binary.BigEndian.AppendUint16(append(e.b, 0xde), uint16(n))
	default:
		e.b = binary.BigEndian.AppendUint32(append(e.b, 0xdf), uint32(n))
	}
}
