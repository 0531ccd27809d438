package indexer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

func split(blocks []kv.Block) ([]kv.LocalHash, []kv.SeqHash) {
	var ls []kv.LocalHash
	var ss []kv.SeqHash
	for _, b := range blocks {
		ls = append(ls, b.TokensHash)
		ss = append(ss, b.Hash)
	}
	return ls, ss
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestApprox_BlocksExpireAfterTTL(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(0, 0)
	require.NoError(t, err)
	ls, ss := split(chain(A, B))
	a.Insert(1, ls, ss, t0)
	assert.Equal(t, map[uint64]int{1: 2}, depths(a.Indexer, A, B))

	a.Expire(t0.Add(DefaultTTL - time.Millisecond))
	assert.Equal(t, map[uint64]int{1: 2}, depths(a.Indexer, A, B), "still inside the TTL")

	a.Expire(t0.Add(DefaultTTL))
	assert.Empty(t, depths(a.Indexer, A, B))
	assert.Equal(t, 0, a.Len())
	assert.Equal(t, 0, a.Stats().Nodes)
}

func TestApprox_ReinsertRefreshesTTL(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(10*time.Second, 0)
	require.NoError(t, err)
	ls, ss := split(chain(A, B, C))
	a.Insert(1, ls[:2], ss[:2], t0)
	a.Insert(1, ls, ss, t0.Add(8*time.Second)) // refreshes A, B; adds C

	a.Expire(t0.Add(12 * time.Second))
	assert.Equal(t, map[uint64]int{1: 3}, depths(a.Indexer, A, B, C), "the refresh moved the expiry")
	a.Expire(t0.Add(18 * time.Second))
	assert.Empty(t, depths(a.Indexer, A, B, C))
}

func TestApprox_TTLsArePerWorker(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(10*time.Second, 0)
	require.NoError(t, err)
	ls, ss := split(chain(A, B))
	a.Insert(1, ls, ss, t0)
	a.Insert(2, ls, ss, t0.Add(5*time.Second))
	a.Expire(t0.Add(11 * time.Second))
	assert.Equal(t, map[uint64]int{2: 2}, depths(a.Indexer, A, B))
	assert.True(t, a.RemoveWorker(2))
	assert.Equal(t, 0, a.Len())
	a.Expire(t0.Add(time.Hour)) // stale queue entries of a removed worker are harmless
	assert.Equal(t, 1, a.Stats().Workers, "only worker 1, now empty, is known; worker 2 is not recreated")
	assert.Equal(t, 0, a.TreeSize(1))
}

func TestApprox_SizeIsBounded(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(time.Hour, 10)
	require.NoError(t, err)
	// Four prompts of three blocks on four workers: 12 blocks > 10, so the
	// oldest go until at most 8 remain.
	for w := uint64(1); w <= 4; w++ {
		ls, ss := split(chain(A, B, C))
		a.Insert(w, ls, ss, t0.Add(time.Duration(w)*time.Second))
	}
	assert.LessOrEqual(t, a.Len(), 8)
	assert.Equal(t, a.Len(), a.Stats().IndexedBlocks)
	got := depths(a.Indexer, A, B, C)
	assert.NotContains(t, got, uint64(1), "the oldest worker's blocks are evicted first")
	assert.Equal(t, 3, got[4], "the newest prompt is whole")
}

func TestApprox_RejectsNegativeSettings(t *testing.T) {
	t.Parallel()
	_, err := NewApprox(-time.Second, 0)
	assert.ErrorContains(t, err, "ttl")
	_, err = NewApprox(0, -1)
	assert.ErrorContains(t, err, "max size")
}

// TestApprox_QueueBoundedByLiveBlocks re-inserts one 100-block prompt
// 10,000 times: the expiry queue must grow with the blocks held, not with
// the insert rate.
func TestApprox_QueueBoundedByLiveBlocks(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(time.Minute, 0)
	require.NoError(t, err)
	locals := make([]kv.LocalHash, 100)
	for i := range locals {
		locals[i] = kv.LocalHash(1000 + i)
	}
	ls, ss := split(chain(locals...))
	for i := range 10_000 {
		a.Insert(1, ls, ss, t0.Add(time.Duration(i)*time.Millisecond))
	}
	assert.Equal(t, 100, a.Len())
	assert.LessOrEqual(t, len(a.queue), 2*100, "queue entries")
}

// TestApprox_RefreshedBlocksExpireInOrder interleaves refreshes with new
// blocks so that refreshed blocks end up expiring before blocks inserted
// later: each must go at its own expiry, not when a later one does.
func TestApprox_RefreshedBlocksExpireInOrder(t *testing.T) {
	t.Parallel()
	a, err := NewApprox(10*time.Second, 0)
	require.NoError(t, err)
	ls, ss := split(chain(A, B))
	lc, sc := split(chain(C))
	a.Insert(1, ls, ss, t0)                    // A, B expire at 10 s
	a.Insert(1, ls, ss, t0.Add(5*time.Second)) // refreshed: 15 s
	a.Insert(1, lc, sc, t0.Add(9*time.Second)) // C: 19 s
	a.Expire(t0.Add(12 * time.Second))         // A, B's first expiry passed
	assert.Equal(t, map[uint64]int{1: 2}, depths(a.Indexer, A, B))
	a.Expire(t0.Add(16 * time.Second))
	assert.Empty(t, depths(a.Indexer, A, B), "A, B expire at 15 s, before C")
	assert.Equal(t, map[uint64]int{1: 1}, depths(a.Indexer, C))
	a.Expire(t0.Add(19 * time.Second))
	assert.Equal(t, 0, a.Len())
}
