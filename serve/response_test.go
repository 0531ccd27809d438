package serve

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestAppendJSONString_RoundTrips: whatever the text, the chunk's string
// decodes back to it.
func TestAppendJSONString_RoundTrips(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		var back string
		require.NoError(t, json.Unmarshal(appendJSONString(nil, s), &back))
		require.Equal(t, s, back)
	})
}

// TestAnswer_SameRequestSameText: filler depends on the seed and the
// prompt alone; echo repeats the prompt's pieces.
func TestAnswer_SameRequestSameText(t *testing.T) {
	t.Parallel()
	s := &Server{opts: Options{Seed: 7}}
	p := &prepared{tokens: Tokenize("one two three", nil, nil)}
	a, b := s.answerFor(p).text(0, 12), s.answerFor(p).text(0, 12)
	require.Equal(t, a, b)
	q := &prepared{tokens: Tokenize("one two four", nil, nil)}
	require.NotEqual(t, a, s.answerFor(q).text(0, 12))
	var pieces []string
	Tokenize("say it again", nil, &pieces)
	e := &prepared{tokens: []uint32{1}, echo: pieces}
	require.Equal(t, "say it again say it", s.answerFor(e).text(0, 5))
}
