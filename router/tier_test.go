package router_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/router"
)

// storeOn feeds worker's Stored event for blocks from..to of prompt on
// medium m, as an engine announces what a tier below its GPU pool took
// in: no parent, no token hashes.
func storeOn(r *router.Router, worker uint64, m kv.Medium, prompt string, from, to int) {
	_, ss := kv.BlockHashes(tokens(prompt), bs, nil, nil)
	ev := kv.Event{Kind: kv.Stored, Medium: m}
	for _, h := range ss[from:to] {
		ev.Blocks = append(ev.Blocks, kv.Block{Hash: h})
	}
	r.KVEvent(worker, ev)
}

// tierScenario routes an 8-block prompt between an idle worker a that
// holds nothing and a worker b that is busier (a 2-block prompt pending)
// but holds the prompt on a tier below its GPU pool (or, with gpu, its
// first block on the GPU and the rest on the tier). It returns the
// worker chosen. In blocks, a costs 8 prefill + 8 decode = 16; b costs
// (2 pending + 8 − credit) prefill + 10 decode, where the credit is what
// b's cached blocks count.
func tierScenario(t *testing.T, mutate func(*router.Config), m kv.Medium, gpu bool) uint64 {
	t.Helper()
	r := newRouter(t, mutate, agg(workerB)...)
	require.Equal(t, workerB, route(t, r, "pending", "QR"))
	require.NoError(t, r.AddWorker(agg(workerA)[0]))
	const prompt = "ABCDEFGH"
	from := 0
	if gpu {
		store(t, r, workerB, prompt[:1], 0)
		from = 1
	}
	if m != kv.MediumGPU {
		storeOn(r, workerB, m, prompt, from, len(prompt))
	}
	return route(t, r, "p", prompt)
}

// TestRouter_HostTierHitWinsTheChoice: a worker holding a prompt on its
// host tier (CPU) earns host_cache_hit_weight (0.75) per block, as in
// Dynamo's kv router: b's cost falls to 4 + 10 = 14 < 16, so b wins, where
// with the weight at 0 (or the prompt held nowhere) a does.
func TestRouter_HostTierHitWinsTheChoice(t *testing.T) {
	t.Parallel()
	assert.Equal(t, workerB, tierScenario(t, nil, kv.MediumCPU, false), "host tier hit, default weights")
	assert.Equal(t, workerA, tierScenario(t, nil, kv.MediumGPU, false), "held nowhere")
	assert.Equal(t, workerA, tierScenario(t, func(c *router.Config) { c.HostCacheHitWeight = 0 }, kv.MediumCPU, false),
		"host_cache_hit_weight 0")
	assert.Equal(t, workerB, tierScenario(t, func(c *router.Config) { c.DynamoCompat = true }, kv.MediumCPU, false),
		"dynamo_compat weighs tiers alike")
	// A tier run continuing a GPU prefix: 1 GPU block + 7 × 0.75.
	assert.Equal(t, workerB, tierScenario(t, nil, kv.MediumCPU, true), "GPU prefix, host tier continues it")
}

// TestRouter_DiskTierHitWeighsLess: a disk (DISK) or object storage
// (EXTERNAL) hit earns disk_cache_hit_weight (0.25) per block: b's cost,
// 8 + 10 = 18, stays above a's 16, unless the weight is raised.
func TestRouter_DiskTierHitWeighsLess(t *testing.T) {
	t.Parallel()
	for _, m := range []kv.Medium{kv.MediumDisk, kv.MediumExternal} {
		assert.Equal(t, workerA, tierScenario(t, nil, m, false), "%s at 0.25", m)
		assert.Equal(t, workerB, tierScenario(t, func(c *router.Config) { c.DiskCacheHitWeight = 0.75 }, m, false),
			"%s at 0.75", m)
	}
}

// TestRouter_TierBlocksLeaveWithTheWorker: RemoveWorker drops a worker's
// tier blocks with its GPU ones.
func TestRouter_TierBlocksLeaveWithTheWorker(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil, agg(workerA, workerB)...)
	storeOn(r, workerB, kv.MediumCPU, "ABCD", 0, 4)
	require.Equal(t, 4, r.Stats().Index.TierBlocks)
	require.True(t, r.RemoveWorker(workerB))
	assert.Zero(t, r.Stats().Index.TierBlocks)
}
