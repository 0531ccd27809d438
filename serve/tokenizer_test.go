package serve

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestTokenize_PiecesAsDocumented(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text   string
		pieces []string
	}{
		{"Hello there, world!", []string{"Hello", " there", ",", " world", "!"}},
		{"  two  spaces", []string{"  two", "  spaces"}},
		{"supercalifragilistic", []string{"supercal", "ifragili", "stic"}},
		{"trailing  ", []string{"trailing", "  "}},
		{"naïve café 42", []string{"naïve", " café", " 42"}},
		{"", nil},
	} {
		var pieces []string
		ids := Tokenize(tc.text, nil, &pieces)
		assert.Equal(t, tc.pieces, pieces, "%q", tc.text)
		assert.Len(t, ids, len(pieces))
	}
}

// TestTokenize_Properties: the pieces put back together are the text; ids
// are in the vocabulary and the same on every call; a text extending
// another starts with all its ids but the last piece's (which the
// extension may lengthen).
func TestTokenize_Properties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.StringMatching(`[a-zA-Z0-9 ,.!?é\n]{0,60}`).Draw(t, "a")
		b := rapid.StringMatching(`[a-zA-Z0-9 ,.!?é\n]{0,60}`).Draw(t, "b")
		var pieces []string
		ids := Tokenize(a, nil, &pieces)
		require.Equal(t, a, strings.Join(pieces, ""))
		require.Equal(t, ids, Tokenize(a, nil, nil))
		for _, id := range ids {
			require.Less(t, id, uint32(Vocab))
		}
		long := Tokenize(a+b, nil, nil)
		if n := len(ids) - 1; n > 0 {
			require.Equal(t, ids[:n], long[:n])
		}
	})
}

func BenchmarkTokenize(b *testing.B) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 64)
	ids := make([]uint32, 0, 1024)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		ids = Tokenize(text, ids[:0], nil)
	}
}
