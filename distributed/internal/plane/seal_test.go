package plane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSeal_AnyChangedByteFailsTheMAC: a sealed message verifies under its
// key only as it was sealed: not with a byte of it changed, not under
// another key, id, direction or subject.
func TestSeal_AnyChangedByteFailsTheMAC(t *testing.T) {
	t.Parallel()
	key := NewMACKey()
	body := []byte(`{"op":"cancel","session":7,"seq":3,"id":9}`)
	data := Seal(DirCommand, "mocker.ns.1.cmd", body, Keyed{ID: 7, Key: key})
	tags, got, err := Unseal(data)
	require.NoError(t, err)
	require.Len(t, tags, 1)
	assert.Equal(t, body, got)
	assert.True(t, Verify(tags[0], key, DirCommand, "mocker.ns.1.cmd", got))

	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x20
		tags, got, err := Unseal(bad)
		if err != nil {
			continue // the header no longer reads: dropped as malformed
		}
		ok := len(tags) == 1 && tags[0].ID == 7 && Verify(tags[0], key, DirCommand, "mocker.ns.1.cmd", got)
		assert.False(t, ok, "byte %d changed and still verified", i)
	}
	tests := []struct {
		name    string
		key     []byte
		dir     byte
		subject string
	}{
		{"another key", NewMACKey(), DirCommand, "mocker.ns.1.cmd"},
		{"as a frame", key, DirFrame, "mocker.ns.1.cmd"},
		{"to another worker", key, DirCommand, "mocker.ns.2.cmd"},
	}
	for _, tt := range tests {
		assert.False(t, Verify(tags[0], tt.key, tt.dir, tt.subject, body), tt.name)
	}
	moved := tags[0]
	moved.ID = 8
	assert.False(t, Verify(moved, key, DirCommand, "mocker.ns.1.cmd", body), "under another id")
}

// TestSeal_MalformedHeadersAreRefused: a message that is not sealed, or
// whose tag count runs past its end or past the bound, does not unseal.
func TestSeal_MalformedHeadersAreRefused(t *testing.T) {
	t.Parallel()
	for name, data := range map[string][]byte{
		"empty":         nil,
		"short tags":    {sealVersion, 0, 2, 1, 2, 3},
		"too many tags": append([]byte{sealVersion, 0xff, 0xff}, make([]byte, 1<<20)...),
	} {
		_, _, err := Unseal(data)
		assert.ErrorIs(t, err, errMalformed, name)
	}
}

// TestSeal_AnotherVersionIsNamed: a message of another wire version (the
// JSON of version 1, version 2's one command per message, or a later one)
// is refused with both versions named.
func TestSeal_AnotherVersionIsNamed(t *testing.T) {
	t.Parallel()
	for name, data := range map[string][]byte{
		"version 1":   {1, 0, 0, '{', '}'},
		"version 2":   {2, 0, 0},
		"version 3":   {3, 0, 0},
		"a later one": {WireVersion + 1, 0, 0},
		"plain JSON":  []byte(`{"seq":0,"leave":"x"}`),
	} {
		_, _, err := Unseal(data)
		require.Error(t, err, name)
		assert.True(t, IsVersionError(err), name)
		assert.Contains(t, err.Error(), fmt.Sprintf("version %d from the peer", data[0]), name)
		assert.Contains(t, err.Error(), fmt.Sprintf("speaks version %d", WireVersion), name)
	}
}

// TestSessionKey_BothSidesDeriveTheSameKeyOnlyForTheirSession: the router
// and the worker reach one key from their own pair and the other's public
// half; any other session, worker, router or namespace has another.
func TestSessionKey_BothSidesDeriveTheSameKeyOnlyForTheirSession(t *testing.T) {
	t.Parallel()
	router, err := NewKeyPair()
	require.NoError(t, err)
	worker, err := NewKeyPair()
	require.NoError(t, err)
	stranger, err := NewKeyPair()
	require.NoError(t, err)
	k1, err := router.SessionKey(worker.Public(), "ns", 0x10, 0x20, 5)
	require.NoError(t, err)
	k2, err := worker.SessionKey(router.Public(), "ns", 0x10, 0x20, 5)
	require.NoError(t, err)
	assert.Equal(t, k1, k2)
	others := []struct {
		name string
		k    KeyPair
		peer string
		ns   string
		inst int64
		rt   int64
		sess uint64
	}{
		{"another session", worker, router.Public(), "ns", 0x10, 0x20, 6},
		{"another worker id", worker, router.Public(), "ns", 0x11, 0x20, 5},
		{"another router id", worker, router.Public(), "ns", 0x10, 0x21, 5},
		{"another namespace", worker, router.Public(), "ns2", 0x10, 0x20, 5},
		{"a stranger's pair", stranger, router.Public(), "ns", 0x10, 0x20, 5},
	}
	for _, o := range others {
		k, err := o.k.SessionKey(o.peer, o.ns, o.inst, o.rt, o.sess)
		require.NoError(t, err)
		assert.NotEqual(t, k1, k, o.name)
	}
	_, err = worker.SessionKey("not base64!", "ns", 1, 2, 3)
	assert.Error(t, err)
}

// benchValues are a typical submit and a typical decode frame.
func benchValues() (Command, Frame) {
	return Command{Op: OpSubmit, Session: 1 << 60, Seq: 1234, Ack: 5678, ID: 42, Tokens: make([]uint32, 1024), MaxTokens: 128},
		Frame{Seq: 99, Head: 100, Items: []Item{{Output: &WireOutput{Start: 1, End: 2, Ran: true}}}}
}

// BenchmarkSeal measures the MAC's CPU per message beside what the plane
// spends anyway on the same message: decoding its body (decode), and, for
// comparison, a JSON decode of the same values as wire version 1 did
// (json-v1-decode; the field names are Go's now that the wire types carry
// no JSON tags). append-seal is seal into a reused buffer, as the
// plane's senders do, under the same key.
func BenchmarkSeal(b *testing.B) {
	c, f := benchValues()
	cmd, err := EncodeCommand(&c)
	require.NoError(b, err)
	frm, err := EncodeFrame(&f)
	require.NoError(b, err)
	cmdJSON, err := json.Marshal(c)
	require.NoError(b, err)
	frmJSON, err := json.Marshal(f)
	require.NoError(b, err)
	for _, m := range []struct {
		name       string
		body, json []byte
		decode     func([]byte) error
	}{
		{"command-1024-tokens", cmd, cmdJSON, func(p []byte) error { var c Command; return DecodeCommand(p, &c) }},
		{"frame", frm, frmJSON, func(p []byte) error { var f Frame; return DecodeFrame(p, &f) }},
	} {
		b.Run(m.name+"/seal", func(b *testing.B) {
			b.SetBytes(int64(len(m.body)))
			for b.Loop() {
				_ = Seal(DirCommand, "mocker.ns.1234567890abcdef.cmd", m.body, Keyed{ID: 1, Key: benchKey})
			}
		})
		b.Run(m.name+"/append-seal", func(b *testing.B) {
			b.SetBytes(int64(len(m.body)))
			var buf []byte
			for b.Loop() {
				buf = AppendSeal(buf[:0], DirCommand, "mocker.ns.1234567890abcdef.cmd", m.body, Keyed{ID: 1, Key: benchKey})
			}
		})
		data := Seal(DirCommand, "mocker.ns.1234567890abcdef.cmd", m.body, Keyed{ID: 1, Key: benchKey})
		b.Run(m.name+"/unseal+verify", func(b *testing.B) {
			b.SetBytes(int64(len(m.body)))
			for b.Loop() {
				tags, body, _ := Unseal(data)
				if !Verify(tags[0], benchKey, DirCommand, "mocker.ns.1234567890abcdef.cmd", body) {
					b.Fatal("does not verify")
				}
			}
		})
		b.Run(m.name+"/decode", func(b *testing.B) {
			b.SetBytes(int64(len(m.body)))
			for b.Loop() {
				if err := m.decode(m.body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(m.name+"/json-v1-decode", func(b *testing.B) {
			b.SetBytes(int64(len(m.json)))
			for b.Loop() {
				var v map[string]any
				_ = json.Unmarshal(m.json, &v)
			}
		})
	}
}

var benchKey = NewMACKey()

// TestMAC_IsTheKeysHMAC: a kept MAC seals and checks as the key itself
// does, message after message, and refuses what the key refuses.
func TestMAC_IsTheKeysHMAC(t *testing.T) {
	t.Parallel()
	key := NewMACKey()
	m := NewMAC(key)
	for i, body := range [][]byte{[]byte("one"), nil, []byte("a longer body, to cross a block boundary of the hash function......")} {
		subject := fmt.Sprintf("mocker.ns.%d.cmd", i)
		kept := Seal(DirCommand, subject, body, Keyed{ID: 7, MAC: m})
		assert.Equal(t, Seal(DirCommand, subject, body, Keyed{ID: 7, Key: key}), kept, "message %d", i)
		tags, b, err := Unseal(kept)
		require.NoError(t, err)
		assert.True(t, m.Verify(tags[0], DirCommand, subject, b))
		assert.False(t, m.Verify(tags[0], DirFrame, subject, b), "another direction")
		assert.False(t, m.Verify(tags[0], DirCommand, subject+"x", b), "another subject")
		assert.False(t, NewMAC(NewMACKey()).Verify(tags[0], DirCommand, subject, b), "another key")
	}
}

// TestRejections_LogDueOncePerInterval: a flood of drops is logged once
// per RejectLogEvery, from any number of goroutines.
func TestRejections_LogDueOncePerInterval(t *testing.T) {
	var r Rejections
	var due atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if r.LogDue() {
					due.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(1), due.Load(), "one line for the flood")
	r.logged.Add(-int64(RejectLogEvery)) // as if the interval passed
	assert.True(t, r.LogDue())
	assert.False(t, r.LogDue())
}

// TestSeal_AppendSealIsSeal: AppendSeal writes Seal's bytes after what dst
// holds, whether the key is raw or a kept MAC, and a reused buffer seals
// the next message whole.
func TestSeal_AppendSealIsSeal(t *testing.T) {
	t.Parallel()
	key := NewMACKey()
	keys := []Keyed{{ID: 1, Key: key}, {ID: 2, MAC: NewMAC(NewMACKey())}}
	want := Seal(DirFrame, "subj", []byte("body"), keys...)
	got := AppendSeal([]byte("prefix"), DirFrame, "subj", []byte("body"), keys...)
	assert.Equal(t, append([]byte("prefix"), want...), got)

	buf := AppendSeal(nil, DirCommand, "subj", bytes.Repeat([]byte{7}, 300), keys[0])
	buf = AppendSeal(buf[:0], DirCommand, "subj", []byte("short"), keys[0])
	assert.Equal(t, Seal(DirCommand, "subj", []byte("short"), keys[0]), buf)
	tags, body, err := Unseal(buf)
	require.NoError(t, err)
	assert.Equal(t, []byte("short"), body)
	assert.True(t, Verify(tags[0], key, DirCommand, "subj", body))
}
