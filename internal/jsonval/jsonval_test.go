package jsonval

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 50)
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"null", nil, "null"},
		{"string", "x", `string "x"`},
		{"long string is cut", long, `string "` + long[:40] + `…"`},
		{"boolean", true, "boolean true"},
		{"json number", json.Number("12.50"), "number 12.50"},
		{"float64", 1.5, "number 1.5"},
		{"whole float64", float64(-1), "number -1"},
		{"float32", float32(0.25), "number 0.25"},
		{"int64 from a JS runtime", int64(7), "number 7"},
		{"uint8", uint8(255), "number 255"},
		{"object", map[string]any{"a": 1}, "an object"},
		{"array", []any{1}, "an array"},
		{"other", struct{}{}, "struct {}"},
	} {
		assert.Equal(t, tc.want, Describe(tc.v), tc.name)
	}
}
