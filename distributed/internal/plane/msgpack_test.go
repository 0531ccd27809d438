package plane

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/kv"
)

// unpack decodes the MessagePack subset msgpack writes, for tests: maps
// become map[string]any, integers uint64, binary []byte.
func unpack(b []byte) (any, []byte, error) {
	if len(b) == 0 {
		return nil, nil, fmt.Errorf("short")
	}
	c, b := b[0], b[1:]
	be := func(n int) (uint64, []byte) {
		var v uint64
		for i := range n {
			v = v<<8 | uint64(b[i])
		}
		return v, b[n:]
	}
	switch {
	case c < 0x80:
		return uint64(c), b, nil
	case c&0xf0 == 0x80, c == 0xde, c == 0xdf:
		var n uint64
		switch c {
		case 0xde:
			n, b = be(2)
		case 0xdf:
			n, b = be(4)
		default:
			n = uint64(c & 0x0f)
		}
		m := map[string]any{}
		for range n {
			k, rest, err := unpack(b)
			if err != nil {
				return nil, nil, err
			}
			v, rest, err := unpack(rest)
			if err != nil {
				return nil, nil, err
			}
			m[k.(string)], b = v, rest
		}
		return m, b, nil
	case c&0xf0 == 0x90, c == 0xdc, c == 0xdd:
		var n uint64
		switch c {
		case 0xdc:
			n, b = be(2)
		case 0xdd:
			n, b = be(4)
		default:
			n = uint64(c & 0x0f)
		}
		a := make([]any, 0, n)
		for range n {
			v, rest, err := unpack(b)
			if err != nil {
				return nil, nil, err
			}
			a, b = append(a, v), rest
		}
		return a, b, nil
	case c&0xe0 == 0xa0, c == 0xd9, c == 0xda, c == 0xdb, c == 0xc4, c == 0xc5, c == 0xc6:
		var n uint64
		switch c {
		case 0xd9, 0xc4:
			n, b = be(1)
		case 0xda, 0xc5:
			n, b = be(2)
		case 0xdb, 0xc6:
			n, b = be(4)
		default:
			n = uint64(c & 0x1f)
		}
		s := b[:n]
		if c >= 0xc4 && c <= 0xc6 {
			return append([]byte(nil), s...), b[n:], nil
		}
		return string(s), b[n:], nil
	case c == 0xc0:
		return nil, b, nil
	case c == 0xcc:
		v, rest := be(1)
		return v, rest, nil
	case c == 0xcd:
		return uint64(binary.BigEndian.Uint16(b)), b[2:], nil
	case c == 0xce:
		return uint64(binary.BigEndian.Uint32(b)), b[4:], nil
	case c == 0xcf:
		return binary.BigEndian.Uint64(b), b[8:], nil
	}
	return nil, nil, fmt.Errorf("unsupported byte %#x", c)
}

func mustUnpack(t *testing.T, b []byte) any {
	t.Helper()
	v, rest, err := unpack(b)
	require.NoError(t, err)
	require.Empty(t, rest)
	return v
}

func TestEventPlane_RouterEventIsDynamosShape(t *testing.T) {
	t.Parallel()
	ev := kv.Event{ID: 7, Kind: kv.Stored, HasParent: true, Parent: 1 << 40,
		Blocks: []kv.Block{{Hash: 300, TokensHash: 1 << 63}}}
	p := EventPublisher{ID: 0xabc}
	env := mustUnpack(t, p.Envelope(TopicKVEvents, RouterEvent(5, ev), time.Unix(1, 0)))
	m := env.(map[string]any)
	assert.Equal(t, "kv-events", m["topic"])
	assert.Equal(t, uint64(0xabc), m["publisher_id"])
	assert.Equal(t, uint64(0), m["sequence"])
	assert.Equal(t, uint64(1000), m["published_at"])
	got := mustUnpack(t, m["payload"].([]byte))
	want := map[string]any{"worker_id": uint64(5), "storage_tier": "device", "event": map[string]any{
		"event_id": uint64(7), "dp_rank": uint64(0), "data": map[string]any{"stored": map[string]any{
			"parent_hash": uint64(1 << 40),
			"blocks":      []any{map[string]any{"block_hash": uint64(300), "tokens_hash": uint64(1 << 63)}}}}}}
	assert.Equal(t, want, got)

	removed := mustUnpack(t, RouterEvent(5, kv.Event{ID: 8, Kind: kv.Removed, RemovedHashes: []kv.SeqHash{1, 2}}))
	assert.Equal(t, map[string]any{"removed": map[string]any{"block_hashes": []any{uint64(1), uint64(2)}}},
		removed.(map[string]any)["event"].(map[string]any)["data"])
	cleared := mustUnpack(t, RouterEvent(5, kv.Event{ID: 9, Kind: kv.Cleared}))
	assert.Equal(t, "cleared", cleared.(map[string]any)["event"].(map[string]any)["data"])
	assert.Equal(t, uint64(1), mustUnpack(t, p.Envelope(TopicMetrics, nil, time.Unix(1, 0))).(map[string]any)["sequence"])
}

func TestEventPlane_ActiveLoadIsDynamosShape(t *testing.T) {
	t.Parallel()
	got := mustUnpack(t, ActiveLoad(5, engine.Metrics{RouterActiveBlocks: 70000, ActiveBlocks: 90000}))
	assert.Equal(t, map[string]any{"worker_id": uint64(5), "dp_rank": uint64(0), "active_decode_blocks": uint64(70000),
		"kv_used_blocks": uint64(70000)}, got)
}

func TestMsgpack_LengthsAcrossEncodings(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 31, 32, 255, 256, 65535, 65536} {
		s := string(make([]byte, n))
		var e msgpack
		e.array(1)
		e.str(s)
		assert.Equal(t, []any{s}, mustUnpack(t, e.b), "str of %d", n)
		var b msgpack
		b.bin([]byte(s))
		assert.Len(t, mustUnpack(t, b.b), n, "bin of %d", n)
	}
	for _, v := range []uint64{0, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1} {
		var e msgpack
		e.uint(v)
		assert.Equal(t, v, mustUnpack(t, e.b))
	}
	var e msgpack
	e.mapN(20)
	for i := range 20 {
		e.str(fmt.Sprint(i))
		e.nil()
	}
	assert.Len(t, mustUnpack(t, e.b), 20)
}
