package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSGLang_OptimisticPrefillHandsOff(t *testing.T) {
	cfg := roomyDisagg()
	cfg.Engine = "sglang"
	cfg.Args["sglang"] = map[string]any{"optimistic_prefill": true}
	c := start(t, cfg)
	for _, r := range runAll(c, repeat(Request{PromptTokens: 64, MaxTokens: 5}, 4)) {
		require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
		assert.Equal(t, "transferred", r.PinOutcome)
		assert.Equal(t, 5, r.OutputTokens)
		assert.Positive(t, r.TransferMs)
	}
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(4), s.TransfersCompleted)
}
