package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// TestRequest_HashesGivenStandForTheTokens shows the cluster takes a
// request's Hashes for its prompt's: two prompts of different tokens
// given the same hashes hit each other's blocks, which their tokens alone
// never do; hashes in another block size are ignored.
func TestRequest_HashesGivenStandForTheTokens(t *testing.T) {
	t.Parallel()
	cfg := Config{Workers: 1, Seed: 1, Args: map[string]any{"num_gpu_blocks": 256}}
	p, err := cfg.Plan()
	require.NoError(t, err)
	bs := p.BlockSize()
	require.Equal(t, DefaultBlockSize, bs)
	a, b := make([]uint32, 320), make([]uint32, 320)
	for i := range a {
		a[i], b[i] = uint32(i+1), uint32(i+50001)
	}
	shared := &kv.Hashes{BlockSize: bs}
	shared.Locals, shared.Seqs = kv.BlockHashes(a, bs, nil, nil)
	other := &kv.Hashes{BlockSize: 2 * bs}
	other.Locals, other.Seqs = kv.BlockHashes(a, 2*bs, nil, nil)
	run := func(ha, hb *kv.Hashes) Result {
		t.Helper()
		out, err := RunVirtual(cfg, []Arrival{
			{AtMs: 0, Request: Request{Tokens: a, MaxTokens: 2, Hashes: ha}},
			{AtMs: 1000, Request: Request{Tokens: b, MaxTokens: 2, Hashes: hb}},
		}, VirtualOptions{})
		require.NoError(t, err)
		for _, r := range out.Results {
			require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
		}
		return out.Results[1]
	}
	assert.Zero(t, run(nil, nil).CachedTokens, "different tokens share no block")
	assert.Equal(t, 304, run(shared, shared).CachedTokens, "the same hashes: every full block but the last token's")
	assert.Zero(t, run(other, other).CachedTokens, "hashes in another block size are not the prompt's")
}
