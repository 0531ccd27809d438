package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRequest_ValidateMaxTokens(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxTokens int
		want      int    // the value after defaults, when valid
		err       string // a substring of the error, when not
	}{
		{"default", 0, DefaultMaxTokens, ""},
		{"one", 1, 1, ""},
		{"at the bound", MaxRequestMaxTokens, MaxRequestMaxTokens, ""},
		{"negative", -2, 0, "max_tokens"},
		{"above the bound", MaxRequestMaxTokens + 1, 0, "max_tokens: want an integer in [1, 16777216], got 16777217"},
		{"huge", 1 << 62, 0, "max_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Request{PromptTokens: 8, MaxTokens: tc.maxTokens}
			err := r.validate()
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, r.MaxTokens)
		})
	}
}
