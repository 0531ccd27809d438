package indexer

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// Dynamo's own approximate-indexer unit tests (lib/kv-router/src/approx.rs),
// replayed through mocker's Approx with the same sizes, TTLs and token ids
// (block size 4). Dynamo's tests sleep on a clock; here time is passed in.

const mirrorBS = 4

// route records tokens as routed to worker at now, as Dynamo's
// process_routing_decision_for_request does.
func route(a *Approx, worker uint64, tokens []uint32, now time.Time) {
	ls, ss := kv.BlockHashes(tokens, mirrorBS, nil, nil)
	a.Insert(worker, ls, ss, now)
}

// scores is find_matches_for_request: worker → matched blocks.
func scores(a *Approx, tokens []uint32) map[uint64]int {
	ls, _ := kv.BlockHashes(tokens, mirrorBS, nil, nil)
	return depths(a.Indexer, ls...)
}

// test_approx_kv_indexer_basic_flow: TTL 200 ms; no match before routing,
// score 1 for worker 0 after, none once the TTL has passed (+50 ms).
func TestDynamo_ApproxKvIndexerBasicFlow(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(200*time.Millisecond, DefaultMaxSize)
	require.NoError(t, err)
	tokens := []uint32{1, 2, 3, 4}
	assert.Empty(t, scores(a, tokens))
	route(a, 0, tokens, t0)
	assert.Equal(t, map[uint64]int{0: 1}, scores(a, tokens))
	a.Expire(t0.Add(250 * time.Millisecond))
	assert.Empty(t, scores(a, tokens))
}

// test_prune_manager_update_resets_ttl: TTL 50 ms; key inserted at 0 and
// again at 25 ms is still there at 55 ms and gone at 85 ms.
func TestDynamo_PruneManagerUpdateResetsTTL(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(50*time.Millisecond, DefaultMaxSize)
	require.NoError(t, err)
	tokens := []uint32{42, 43, 44, 45}
	route(a, 0, tokens, t0)
	route(a, 0, tokens, t0.Add(25*time.Millisecond))
	a.Expire(t0.Add(55 * time.Millisecond))
	assert.Equal(t, map[uint64]int{0: 1}, scores(a, tokens), "not expired prematurely despite the refresh")
	a.Expire(t0.Add(85 * time.Millisecond))
	assert.Empty(t, scores(a, tokens))
}

// held reports which of the blocks of tokens routed to worker hold a TTL
// (Dynamo's prune manager's get_expiry(key).is_some(), key by key).
func held(a *Approx, worker uint64, tokens []uint32) []bool {
	_, ss := kv.BlockHashes(tokens, mirrorBS, nil, nil)
	out := make([]bool, len(ss))
	for i, s := range ss {
		_, out[i] = a.expiry[approxKey{worker, s}]
	}
	return out
}

// test_prune_manager_expiry: TTL 50 ms, no size bound; three keys inserted
// together (here one request of three blocks) each hold a TTL; 70 ms later
// all three expire and none holds one.
func TestDynamo_PruneManagerExpiry(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(50*time.Millisecond, math.MaxInt)
	require.NoError(t, err)
	require.NoError(t, a.SetPruneTargetRatio(0.5))
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	route(a, 0, tokens, t0)
	assert.Equal(t, []bool{true, true, true}, held(a, 0, tokens))
	before := a.Len()
	a.Expire(t0.Add(70 * time.Millisecond))
	assert.Equal(t, 3, before-a.Len(), "expired")
	assert.Equal(t, []bool{false, false, false}, held(a, 0, tokens))
	assert.Empty(t, scores(a, tokens))
}

// test_prune_manager_no_prune_when_within_bounds: size bound 100, prune
// target ratio 0.5; 50 keys inserted together (one request of 50 blocks)
// prune nothing, and all 50 still hold a TTL.
func TestDynamo_PruneManagerNoPruneWhenWithinBounds(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(10*time.Second, 100)
	require.NoError(t, err)
	require.NoError(t, a.SetPruneTargetRatio(0.5))
	tokens := make([]uint32, 50*mirrorBS)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	route(a, 0, tokens, t0)
	assert.Equal(t, 50, a.Len(), "nothing pruned")
	for i, h := range held(a, 0, tokens) {
		assert.True(t, h, "key %d still present", i)
	}
}

// test_remove_worker and test_remove_worker_preserves_other_workers:
// tokens [100..103] routed to workers 30 and 31; removing 30 leaves 31's
// score of 1.
func TestDynamo_RemoveWorkerPreservesOtherWorkers(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(5*time.Second, DefaultMaxSize)
	require.NoError(t, err)
	tokens := []uint32{100, 101, 102, 103}
	route(a, 30, tokens, t0)
	route(a, 31, tokens, t0)
	assert.Equal(t, map[uint64]int{30: 1, 31: 1}, scores(a, tokens))
	require.True(t, a.RemoveWorker(30))
	assert.Equal(t, map[uint64]int{31: 1}, scores(a, tokens))
	require.True(t, a.RemoveWorker(31))
	assert.Empty(t, scores(a, tokens))
}

// test_common_prefix_overlap: [1,2,3,4] routed to worker 11; the query
// [1..8] shares its first block, score 1.
func TestDynamo_CommonPrefixOverlap(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(5*time.Second, DefaultMaxSize)
	require.NoError(t, err)
	route(a, 11, []uint32{1, 2, 3, 4}, t0)
	assert.Equal(t, map[uint64]int{11: 1}, scores(a, []uint32{1, 2, 3, 4, 5, 6, 7, 8}))
}

// test_multiple_workers_same_block: [9,8,7,6] on workers 21 and 22, both
// score 1.
func TestDynamo_MultipleWorkersSameBlock(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(5*time.Second, DefaultMaxSize)
	require.NoError(t, err)
	tokens := []uint32{9, 8, 7, 6}
	route(a, 21, tokens, t0)
	route(a, 22, tokens, t0)
	assert.Equal(t, map[uint64]int{21: 1, 22: 1}, scores(a, tokens))
}

// test_approx_indexer_e2e_pruning: max tree size 5, prune target ratio
// 0.4 (target 2). Five one-block sequences [i·10 .. i·10+3], i = 0..4, 1 ms
// apart, all present; the sixth ([50..53]) exceeds the bound, the 4 oldest
// (i = 0..3) are pruned and the 2 newest (i = 4, 5) remain.
func TestDynamo_ApproxIndexerE2EPruning(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(60*time.Second, 5)
	require.NoError(t, err)
	require.NoError(t, a.SetPruneTargetRatio(0.4))
	seq := func(i uint32) []uint32 { return []uint32{i * 10, i*10 + 1, i*10 + 2, i*10 + 3} }
	for i := range uint32(5) {
		route(a, 42, seq(i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	for i := range uint32(5) {
		assert.Equal(t, map[uint64]int{42: 1}, scores(a, seq(i)), "block %d before the bound is exceeded", i)
	}
	route(a, 42, seq(5), t0.Add(5*time.Millisecond))
	for i := range uint32(4) {
		assert.Empty(t, scores(a, seq(i)), "block %d pruned", i)
	}
	for i := uint32(4); i < 6; i++ {
		assert.Equal(t, map[uint64]int{42: 1}, scores(a, seq(i)), "block %d kept", i)
	}
	assert.Equal(t, 2, a.Len())
}

// storeEv and removeEv build events as Dynamo's test_utils do: block i has
// tokens hash i and block hash i·100.
func storeEv(id uint64, locals []uint64, parent uint64) kv.Event {
	ev := kv.Event{Kind: kv.Stored, ID: id}
	if parent != 0 {
		ev.Parent, ev.HasParent = kv.SeqHash(parent), true
	}
	for _, l := range locals {
		ev.Blocks = append(ev.Blocks, kv.Block{Hash: kv.SeqHash(l * 100), TokensHash: kv.LocalHash(l)})
	}
	return ev
}

func removeEv(id uint64, locals []uint64) kv.Event {
	ev := kv.Event{Kind: kv.Removed, ID: id}
	for _, l := range locals {
		ev.RemovedHashes = append(ev.RemovedHashes, kv.SeqHash(l*100))
	}
	return ev
}

// test_radix_tree (lib/kv-router/src/radix_tree.rs): worker 0 stores
// [1,2,3], worker 1 [1,4,5]; the query [1,2,3] scores 3 and 1. Worker 1
// removes 5 then 4 (lookup sizes 2, then 1) and stores [2,6,7] under its
// block 100: the query then scores 3 and 2, worker 1's lookup holds 4
// blocks, and block 200 has both workers.
func TestDynamo_RadixTree(t *testing.T) {
	t.Parallel()
	x := New()
	q := []kv.LocalHash{1, 2, 3}
	require.NoError(t, x.Apply(0, storeEv(1, []uint64{1, 2, 3}, 0)))
	assert.Equal(t, map[uint64]int{0: 3}, depths(x, q...))
	assert.Equal(t, 3, x.TreeSize(0))

	require.NoError(t, x.Apply(1, storeEv(1, []uint64{1, 4, 5}, 0)))
	assert.Equal(t, map[uint64]int{0: 3, 1: 1}, depths(x, q...))
	assert.Equal(t, 3, x.TreeSize(0))
	assert.Equal(t, 3, x.TreeSize(1))

	require.NoError(t, x.Apply(1, removeEv(2, []uint64{5})))
	assert.Equal(t, 2, x.TreeSize(1))
	require.NoError(t, x.Apply(1, removeEv(3, []uint64{4})))
	assert.Equal(t, 1, x.TreeSize(1))
	assert.Equal(t, 3, x.TreeSize(0))

	require.NoError(t, x.Apply(1, storeEv(4, []uint64{2, 6, 7}, 100)))
	assert.Equal(t, map[uint64]int{0: 3, 1: 2}, depths(x, q...))
	assert.Equal(t, 3, x.TreeSize(0))
	assert.Equal(t, 4, x.TreeSize(1))
	assert.Equal(t, map[uint64]int{0: 2, 1: 2}, depths(x, 1, 2), "block 200 has both workers")
}

// test_radix_tree_apply_event_errors: an unknown parent (12345), removing
// unknown blocks, and a block that is its own parent (parent 100, first
// block 100) are each an error.
func TestDynamo_RadixTreeApplyEventErrors(t *testing.T) {
	t.Parallel()
	x := New()
	require.ErrorIs(t, x.Apply(0, storeEv(0, []uint64{1, 2, 3}, 12345)), ErrUnknownParent)
	require.ErrorIs(t, x.Apply(0, removeEv(0, []uint64{1, 2, 3})), ErrBlockNotFound)
	require.NoError(t, x.Apply(0, storeEv(4, []uint64{1}, 0)))
	require.ErrorIs(t, x.Apply(0, storeEv(5, []uint64{1, 2, 3}, 100)), ErrSelfParent)
}
