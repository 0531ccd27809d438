package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQueueTime_ArrivalToFirstScheduled: a request's QueueMs is its modeled
// arrival to the first pass that scheduled it, between 0 and its time to
// first token; with one running slot, requests arriving together wait for
// those before them, each longer than the last, on both engines and on a
// disaggregated cluster's prefill.
func TestQueueTime_ArrivalToFirstScheduled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"vllm", Config{Workers: 1, Args: map[string]any{"max_num_seqs": 1}}},
		{"sglang", Config{Engine: "sglang", Workers: 1, Args: map[string]any{"max_num_seqs": 1}}},
		{"disagg", Config{Disagg: true, Prefill: PoolConfig{Args: map[string]any{"max_num_seqs": 1}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var arrivals []Arrival
			for i := range 5 {
				tokens := make([]uint32, 300)
				for k := range tokens {
					tokens[k] = uint32(1 + i*1000 + k)
				}
				arrivals = append(arrivals, Arrival{AtMs: 0, Request: Request{Tokens: tokens, MaxTokens: 4}})
			}
			run, err := RunVirtual(tc.cfg, arrivals, VirtualOptions{})
			require.NoError(t, err)
			prev := -1.0
			for i, r := range run.Results {
				require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
				assert.GreaterOrEqual(t, r.QueueMs, 0.0, "request %d", i)
				assert.Less(t, r.QueueMs, r.TTFTMs, "request %d: prefill compute follows the queue", i)
				assert.Greater(t, r.QueueMs, prev, "request %d waits for the ones before it", i)
				prev = r.QueueMs
			}
			assert.Zero(t, run.Results[0].QueueMs, "the first request is scheduled on arrival")
		})
	}
}
