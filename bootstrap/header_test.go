package bootstrap

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validHeaderBytes is written out by hand so the encoder is checked against
// the documented layout, not against itself.
var validHeaderBytes = []byte{
	'M', 'K', 'V', 'T',
	0x02, 0x00, // version 2
	0x00, 0x00, // flags
	0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // transfer id
	0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // request id
	0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, // token
	0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
}

var testToken = Token{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}

func withByte(b []byte, i int, v byte) []byte {
	out := append([]byte(nil), b...)
	out[i] = v
	return out
}

func TestHeader_AppendMatchesDocumentedLayout(t *testing.T) {
	t.Parallel()
	h := NewHeader(0x0102030405060708, 0x0123456789abcdef, testToken)
	got := h.Append(nil)
	assert.Equal(t, validHeaderBytes, got)
	assert.Len(t, got, HeaderSize)
}

func TestDecodeHeader(t *testing.T) {
	t.Parallel()
	zeroID := append([]byte(nil), validHeaderBytes...)
	for i := 8; i < 16; i++ {
		zeroID[i] = 0
	}
	tests := []struct {
		name    string
		in      []byte
		want    Header
		wantErr error
	}{
		{name: "valid", in: validHeaderBytes, want: Header{Version: 2, TransferID: 0x0102030405060708, RequestID: 0x0123456789abcdef, Token: testToken}},
		{name: "zero request id is allowed", in: append(append(append([]byte(nil), validHeaderBytes[:16]...), 0, 0, 0, 0, 0, 0, 0, 0), testToken[:]...), want: Header{Version: 2, TransferID: 0x0102030405060708, Token: testToken}},
		{name: "keep-alive flag", in: withByte(validHeaderBytes, 6, 1), want: Header{Version: 2, Flags: FlagKeepAlive, TransferID: 0x0102030405060708, RequestID: 0x0123456789abcdef, Token: testToken}},
		{name: "empty", in: nil, wantErr: ErrHeaderLength},
		{name: "short", in: validHeaderBytes[:HeaderSize-1], wantErr: ErrHeaderLength},
		{name: "long", in: append(append([]byte(nil), validHeaderBytes...), 0), wantErr: ErrHeaderLength},
		{name: "bad magic", in: withByte(validHeaderBytes, 0, 'X'), wantErr: ErrBadMagic},
		{name: "version 0", in: withByte(validHeaderBytes, 4, 0), wantErr: ErrBadVersion},
		{name: "version 1", in: withByte(validHeaderBytes, 4, 1), wantErr: ErrBadVersion},
		{name: "version 3", in: withByte(validHeaderBytes, 4, 3), wantErr: ErrBadVersion},
		{name: "version high byte", in: withByte(validHeaderBytes, 5, 1), wantErr: ErrBadVersion},
		{name: "flag bit 1", in: withByte(validHeaderBytes, 6, 2), wantErr: ErrBadFlags},
		{name: "flag high bit", in: withByte(validHeaderBytes, 7, 0x80), wantErr: ErrBadFlags},
		{name: "zero transfer id", in: zeroID, wantErr: ErrZeroTransfer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := DecodeHeader(tt.in)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), "bootstrap header")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestStatus_String(t *testing.T) {
	t.Parallel()
	tests := map[Status]string{0: "none", StatusACK: "ACK", StatusAbort: "ABORT", StatusError: "ERROR", 0x7f: "Status(0x7f)"}
	for st, want := range tests {
		assert.Equal(t, want, st.String())
	}
}

func TestNextTransferID_MonotonicAcrossGoroutines(t *testing.T) {
	t.Parallel()
	const goroutines, perG = 8, 2000
	results := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]uint64, perG)
			for i := range ids {
				ids[i] = NextTransferID()
			}
			results[g] = ids
		}()
	}
	wg.Wait()
	seen := make(map[uint64]bool, goroutines*perG)
	for _, ids := range results {
		for i, id := range ids {
			require.NotZero(t, id, "0 means no transfer")
			if i > 0 {
				require.Greater(t, id, ids[i-1], "ids taken by one goroutine must increase")
			}
			require.False(t, seen[id], "id %d issued twice", id)
			seen[id] = true
		}
	}
	assert.Greater(t, NextTransferID(), results[0][perG-1])
}
