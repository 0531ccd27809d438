package plane

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/engine"
)

// modelValueAsMaps builds the Model discovery value the way ModelValue
// did before its card was typed: untyped maps, which encoding/json writes
// with their keys sorted. Dynamo's tools read these bytes, so the typed
// card must write them unchanged.
func modelValueAsMaps(ns string, role engine.WorkerType, id int64, a engine.Args, bootstrapHost string, bootstrapPort int) ([]byte, error) {
	rc := map[string]any{
		"total_kv_blocks": a.NumGPUBlocks, "data_parallel_start_rank": 0, "data_parallel_size": max(a.DPSize, 1),
		"enable_local_indexer": true,
	}
	if a.MaxNumSeqs != nil {
		rc["max_num_seqs"] = *a.MaxNumSeqs
	}
	if a.MaxNumBatchedTokens != nil {
		rc["max_num_batched_tokens"] = *a.MaxNumBatchedTokens
	}
	if bootstrapPort != 0 {
		rc["disaggregated_endpoint"] = map[string]any{"bootstrap_host": bootstrapHost, "bootstrap_port": bootstrapPort}
	}
	card := map[string]any{
		"display_name": "mocker", "kv_cache_block_size": a.BlockSize, "model_type": "Chat",
		"worker_type": string(role), "runtime_config": rc,
	}
	cardJSON, err := json.Marshal(card)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{
		"type": "Model", "namespace": ns, "component": ComponentOf(role), "endpoint": endpointName,
		"instance_id": id, "card_json": json.RawMessage(cardJSON),
	})
}

// TestModelValue_BytesUnchanged: the typed card writes the very bytes the
// untyped maps did, for prefill and decode, with and without the optional
// limits, the disaggregated endpoint and data parallelism; and what it
// writes reads back into the same card.
func TestModelValue_BytesUnchanged(t *testing.T) {
	t.Parallel()
	seqs, batched := 256, 8192
	for _, tc := range []struct {
		name string
		role engine.WorkerType
		args engine.Args
		host string
		port int
	}{
		{"decode", engine.WorkerDecode, engine.Args{BlockSize: 16, NumGPUBlocks: 64}, "", 0},
		{"prefill", engine.WorkerPrefill, engine.Args{BlockSize: 64, NumGPUBlocks: 16384, DPSize: 4}, "10.0.0.7", 41231},
		{"limits", engine.WorkerAggregated, engine.Args{BlockSize: 32, NumGPUBlocks: 1, MaxNumSeqs: &seqs, MaxNumBatchedTokens: &batched}, "", 0},
		{"escaped", engine.WorkerPrefill, engine.Args{BlockSize: 16, NumGPUBlocks: 8}, "<host&>", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns, id := "dyn-<ns>", int64(0x7a3b000000000042)
			want, err := modelValueAsMaps(ns, tc.role, id, tc.args, tc.host, tc.port)
			require.NoError(t, err)
			got, err := ModelValue(ns, tc.role, id, tc.args, tc.host, tc.port)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))

			var m ModelEntry
			require.NoError(t, json.Unmarshal(got, &m))
			assert.Equal(t, id, m.InstanceID)
			assert.Equal(t, tc.role, m.Card.WorkerType)
			assert.Equal(t, tc.args.NumGPUBlocks, m.Card.RuntimeConfig.TotalKVBlocks)
			if tc.port == 0 {
				assert.Nil(t, m.Card.RuntimeConfig.DisaggregatedEndpoint)
			} else {
				require.NotNil(t, m.Card.RuntimeConfig.DisaggregatedEndpoint)
				assert.Equal(t, DisaggregatedEndpoint{Host: tc.host, Port: tc.port}, *m.Card.RuntimeConfig.DisaggregatedEndpoint)
			}
		})
	}
}
