package indexer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// TestFidelity_PruneTargetRatio: past router_max_tree_size the approximate
// index evicts its oldest blocks down to router_prune_target_ratio of the
// bound (Dynamo's default 0.8). Bound 10: four 3-block prompts are 12
// blocks; with ratio 0.5 at most 5 remain, with the default at most 8.
func TestFidelity_PruneTargetRatio(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ratio float64 // 0: default
		max   int
	}{
		{0, 8},
		{0.5, 5},
		{1, 10},
	} {
		a, err := NewApprox(time.Hour, 10)
		require.NoError(t, err)
		if tc.ratio != 0 {
			require.NoError(t, a.SetPruneTargetRatio(tc.ratio))
		}
		for w := uint64(1); w <= 4; w++ {
			ls, ss := split(chain(A, B, C))
			a.Insert(w, ls, ss, t0.Add(time.Duration(w)*time.Second))
		}
		assert.LessOrEqual(t, a.Len(), tc.max, "ratio %v", tc.ratio)
		assert.Greater(t, a.Len(), tc.max-3, "ratio %v: pruned no further than one prompt below the target", tc.ratio)
	}
	a, err := NewApprox(0, 0)
	require.NoError(t, err)
	for _, bad := range []float64{0, -0.1, 1.5} {
		assert.Error(t, a.SetPruneTargetRatio(bad), "ratio %v", bad)
	}
}

// TestFidelity_SelfParentRejected: a Stored event whose block is its own
// parent is an error, as in Dynamo's tree, and changes nothing.
func TestFidelity_SelfParentRejected(t *testing.T) {
	t.Parallel()
	x := New()
	blocks := chain(A, B)
	require.NoError(t, x.Apply(1, kv.Event{Kind: kv.Stored, Blocks: blocks[:1]}))
	before := x.Stats()

	self := kv.Event{Kind: kv.Stored, ID: 1, Parent: blocks[0].Hash, HasParent: true,
		Blocks: []kv.Block{{Hash: blocks[0].Hash, TokensHash: B}}}
	require.ErrorIs(t, x.Apply(1, self), ErrSelfParent)

	chained := kv.Event{Kind: kv.Stored, ID: 2, Blocks: []kv.Block{
		{Hash: 77, TokensHash: C}, {Hash: 77, TokensHash: D},
	}}
	require.ErrorIs(t, x.Apply(1, chained), ErrSelfParent, "the block before it is its parent too")

	after := x.Stats()
	assert.Equal(t, before.Nodes, after.Nodes)
	assert.Equal(t, before.IndexedBlocks, after.IndexedBlocks)
	assert.Equal(t, 1, x.TreeSize(1))
}
