package bootstrap

import (
	"bytes"
	"testing"
)

// FuzzDecodeHeader checks that the decoder never panics, refuses every
// input of the wrong length, and that whatever it accepts re-encodes to the
// same bytes and satisfies the documented checks.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(validHeaderBytes)
	f.Add(NewHeader(1, 0, Token{1}).Append(nil))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if len(b) != HeaderSize {
			if err == nil {
				t.Fatalf("accepted %d bytes, want exactly %d", len(b), HeaderSize)
			}
			return
		}
		if err != nil {
			return
		}
		if h.Version != ProtocolVersion || h.Flags&^FlagKeepAlive != 0 || h.TransferID == 0 {
			t.Fatalf("accepted an invalid header: %+v", h)
		}
		if got := h.Append(nil); !bytes.Equal(got, b) {
			t.Fatalf("re-encoding %+v gave %x, want %x", h, got, b)
		}
	})
}
