package engine

import (
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// radixPath allocates n pages and inserts them as one locked path hashed
// from base, returning the deepest node and the pages' sequence hashes.
func radixPath(t *testing.T, c *radixCache, base uint32, n int) (int32, []kv.SeqHash) {
	t.Helper()
	locals, seqs := kv.BlockHashes(seqTokens(base, 4*n), 4, nil, nil)
	last := int32(noSlot)
	for i := range n {
		s, ok := c.alloc()
		require.True(t, ok)
		last = c.extend(last, s, seqs[i], locals[i], i)
	}
	require.NoError(t, c.audit())
	return last, seqs
}

func TestRadix_LRUEvictsUnlockedLeavesOnly(t *testing.T) {
	c := newRadixCache(8, true)
	a, ah := radixPath(t, c, 100, 3)
	b, bh := radixPath(t, c, 200, 2)
	d, dh := radixPath(t, c, 300, 2)
	c.unlock(a) // least recently used
	c.unlock(d)
	assert.Equal(t, 5, c.evictable)
	assert.Equal(t, 2, c.protected())
	assert.Equal(t, 1, len(c.free))

	// One free page, then evictions: a's leaf first, then its parent once
	// it is a leaf, then its root, then d's leaf; b is locked throughout.
	for range 5 {
		_, ok := c.alloc()
		require.True(t, ok)
		require.NoError(t, c.audit())
	}
	var removed []kv.SeqHash
	for _, e := range c.ev.flush(nil) {
		removed = append(removed, e.RemovedHashes...)
	}
	assert.Equal(t, []kv.SeqHash{ah[2], ah[1], ah[0], dh[1]}, removed)
	_, stillB := c.index.Get(bh[1])
	assert.True(t, stillB, "locked pages are never evicted")

	// d's root page is the only evictable one left; after it, nothing.
	_, ok := c.alloc()
	require.True(t, ok)
	_, ok = c.alloc()
	assert.False(t, ok, "only locked pages remain")
	c.unlock(b)
	assert.Equal(t, 2, c.evictable)
	require.NoError(t, c.audit())
}

func TestRadix_SharedPrefixLockRefs(t *testing.T) {
	c := newRadixCache(8, true)
	a, ah := radixPath(t, c, 100, 3)
	// A second request matches the whole path and locks it too.
	n, last := c.match(ah)
	require.Equal(t, 3, n)
	require.Equal(t, a, last)
	c.lock(last)
	c.unlock(a)
	assert.Zero(t, c.evictable, "still locked by the second request")
	// A third request locks the first two pages and extends onto the
	// cached third: its duplicate page is freed and the node reused.
	parent := c.nodes[a].parent
	c.lock(parent)
	s, ok := c.alloc()
	require.True(t, ok)
	free := len(c.free)
	locals, _ := kv.BlockHashes(seqTokens(100, 12), 4, nil, nil)
	got := c.extend(parent, s, ah[2], locals[2], 2)
	assert.Equal(t, a, got)
	assert.Equal(t, free+1, len(c.free), "the duplicate page went back to the free list")
	require.NoError(t, c.audit())
	// Stored was announced once per page, for the first insertion only.
	stored := 0
	for _, e := range c.ev.flush(nil) {
		if e.Kind == kv.Stored {
			stored += len(e.Blocks)
		}
	}
	assert.Equal(t, 3, stored)
	// The third request's lock becomes a hold: its pages are held-only
	// once the second request lets go.
	c.hold(got)
	assert.Zero(t, c.heldOnly, "the second request still locks every page")
	c.unlock(last)
	require.NoError(t, c.audit())
	assert.Equal(t, 3, c.heldOnly)
	c.unhold(got)
	assert.Zero(t, c.heldOnly)
	assert.Equal(t, 3, c.evictable)
	require.NoError(t, c.audit())
}
