package serve

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestParseTokenIDs_AgreesWithEncodingJSON: the reflection-free reader of
// token id arrays gives what encoding/json gives for plain integer
// arrays, and declines (for the item by item walk) whatever else.
func TestParseTokenIDs_AgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`[1,2,3]`, ` [ 0 , 17 ,4294967295 ] `, "[\n1,\t2\r]", `[7]`,
	} {
		got, ok := parseTokenIDs([]byte(in))
		var want []uint32
		if assert.NoError(t, json.Unmarshal([]byte(in), &want), in) {
			assert.True(t, ok, in)
			assert.Equal(t, want, got, in)
		}
	}
	for _, in := range []string{
		`[]`, `[4294967296]`, `[-1]`, `[1.0]`, `[1e3]`, `[01]`, `[1,]`, `[1 2]`, `[1,"a"]`, `[[1]]`, `[1]x`, `[1`, `1`, ``, `[99999999999999999999999]`,
	} {
		_, ok := parseTokenIDs([]byte(in))
		assert.False(t, ok, in)
	}
}
