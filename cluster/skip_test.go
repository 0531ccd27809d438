package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// hashedArrivals are n arrivals of prompts of 600 to 1,000 tokens (some a
// whole number of blocks) sharing one of three 300-token openings, each
// carrying the hashes of its complete blocks, as a trace reader gives
// them.
func hashedArrivals(n, bs int, gap float64) []Arrival {
	arr := make([]Arrival, n)
	for i := range arr {
		req := Request{PromptTokens: 600 + 16*(i%25) + i%3*5, Prefix: []string{"a", "b", "c"}[i%3], PrefixTokens: 300, MaxTokens: 40 + i%7}
		tokens := promptTokens(req, 3, uint64(i+1))
		h := &kv.Hashes{BlockSize: bs}
		h.Locals, h.Seqs = kv.BlockHashes(tokens, bs, nil, nil)
		arr[i] = Arrival{AtMs: float64(i) * gap, Request: Request{Tokens: tokens, Hashes: h, MaxTokens: req.MaxTokens}}
	}
	return arr
}

// TestRunStream_HashedPromptsKeepTheirResults: a stream whose prompts
// carry their hashes, whose tokens the cluster therefore keeps only past
// the complete blocks (engine.Request.Skip), gives RunVirtual's results
// for the same prompts without hashes, which the cluster hashes and keeps
// whole; so does a cluster with a KV-events listener, whose workers read
// every token (it hears the same token ids either way).
func TestRunStream_HashedPromptsKeepTheirResults(t *testing.T) {
	t.Parallel()
	for _, listen := range []bool{false, true} {
		cfg := saturatedDisagg()
		var heard [2][]uint32
		run := func(k int, arr []Arrival, stream bool) ([]Result, Stats) {
			if listen {
				cfg.OnKVEvents = func(p KVPass) { heard[k] = append(heard[k], p.Tokens...) }
			}
			if !stream {
				out, err := RunVirtual(cfg, arr, VirtualOptions{})
				require.NoError(t, err)
				return out.Results, out.Stats
			}
			got := make([]Result, len(arr))
			out, err := RunStream(cfg, streamOf(arr), StreamOptions{OnResult: func(key int, _ float64, res Result) (StreamArrival, bool) {
				got[key] = res
				return StreamArrival{}, false
			}})
			require.NoError(t, err)
			return got, out.Stats
		}
		const n = 300
		hashed := hashedArrivals(n, DefaultBlockSize, 4)
		plain := make([]Arrival, n)
		for i, a := range hashed {
			a.Request.Hashes = nil
			plain[i] = a
		}
		want, wantStats := run(0, plain, false)
		got, gotStats := run(1, hashed, true)
		assert.Equal(t, want, got, "listener %v", listen)
		assert.Equal(t, wantStats, gotStats, "listener %v", listen)
		assert.Equal(t, heard[0], heard[1], "listener %v", listen)
		assert.Positive(t, gotStats.Completed)
		for _, r := range got {
			require.NotEqual(t, OutcomeError, r.Outcome, r.Error)
		}
		if listen {
			assert.NotEmpty(t, heard[1])
		}
	}
}

// TestCluster_SkipsOnlyTokensNoWorkerReads: the cluster leaves out the
// tokens of a prompt's complete blocks when the request carries their
// hashes in the pools' block size, and keeps every token for hashes of
// another size, for a placed call, or for a KV-events listener.
func TestCluster_SkipsOnlyTokensNoWorkerReads(t *testing.T) {
	t.Parallel()
	const bs = DefaultBlockSize
	c := &Cluster{}
	c.res.router.BlockSize = bs
	a := hashedArrivals(2, bs, 1)[1].Request
	require.Equal(t, 600+16+5, len(a.Tokens))
	assert.Equal(t, 38*bs, c.skippable(&call{req: a}), "the complete blocks' tokens")
	other := a
	other.Hashes = &kv.Hashes{BlockSize: 2 * bs}
	other.Hashes.Locals, other.Hashes.Seqs = kv.BlockHashes(a.Tokens, 2*bs, nil, nil)
	assert.Zero(t, c.skippable(&call{req: other}), "hashes of another block size")
	none := a
	none.Hashes = nil
	assert.Zero(t, c.skippable(&call{req: none}), "no hashes")
	assert.Zero(t, c.skippable(&call{req: a, pd: &pdCall{}}), "a placed call")
	c.cfg.OnKVEvents = func(KVPass) {}
	assert.Zero(t, c.skippable(&call{req: a}), "a KV-events listener")
}
