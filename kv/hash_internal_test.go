package kv

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHash_InPlaceMatchesPortable: hashing the ids where they lie gives the
// hash of their little-endian copy, whatever the block's length.
func TestHash_InPlaceMatchesPortable(t *testing.T) {
	t.Parallel()
	x := uint32(2463534242)
	for _, n := range []int{0, 1, 3, 16, 64, 65, 100} {
		tokens := make([]uint32, n)
		for i := range tokens {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			tokens[i] = x
		}
		assert.Equal(t, hashTokensPortable(tokens), HashTokens(tokens), "%d tokens", n)
	}
}
