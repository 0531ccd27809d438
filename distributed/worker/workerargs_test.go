package worker

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/engine"
)

// TestWorkerArgs_AsAClustersPool: a worker resolves its args as the
// cluster resolves a pool's: an SGLang page size sets the block size, the
// speedup and memory bounds hold, and errors name the flag and key.
func TestWorkerArgs_AsAClustersPool(t *testing.T) {
	t.Parallel()
	a, err := ResolveArgs(Config{Engine: "sglang", Role: engine.WorkerDecode, Args: []byte(`{"sglang": {"page_size": 32}}`)})
	require.NoError(t, err)
	assert.Equal(t, 32, a.BlockSize, "a page size without a block size sets the block size")

	a, err = ResolveArgs(Config{Engine: "vllm", Role: engine.WorkerPrefill})
	require.NoError(t, err)
	assert.Equal(t, 16, a.BlockSize)
	assert.Equal(t, engine.WorkerPrefill, a.WorkerType)

	for args, want := range map[string]string{
		`{"speedup_ratio": 1e9}`:               "--args: speedup_ratio: want a number in [0.001, 1000000]",
		`{"num_gpu_blocks": 2000000000}`:       "--args: num_gpu_blocks: 2000000000 blocks",
		`{"num_gpu_blocks": -1}`:               "--args: num_gpu_blocks:",
		`[1]`:                                  "--args: want a JSON object",
		`{"kv_transfer_abort_timeout_ms": -5}`: "kv_transfer_abort_timeout_ms",
	} {
		_, err := ResolveArgs(Config{Engine: "vllm", Role: engine.WorkerDecode, Args: []byte(args)})
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), want, args)
	}
}
