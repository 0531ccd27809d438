package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// Mirrors of Dynamo's SGLang radix tree and KV manager unit tests
// (lib/mocker's cache/radix_cache.rs and kv_manager/sglang_backend.rs) on
// mocker's radixCache. Dynamo's tree compresses a run of tokens into one
// edge and names pages by pool index; mocker's has one node per page,
// keyed by the page's chained sequence hash. Token ids become pages
// through kv.BlockHashes, so a prefix match of n pages is n·page tokens.
// The engine's dynamo_compat plays no part at this level: these are the
// same in both settings.

// mirrorRadix drives a radixCache the way Dynamo's tests drive its
// RadixCache and SglangKvManager.
type mirrorRadix struct {
	t    *testing.T
	c    *radixCache
	page int
}

func newMirrorRadix(t *testing.T, totalTokens, page int) *mirrorRadix {
	return &mirrorRadix{t: t, c: newRadixCache(totalTokens/page, true), page: page}
}

func (m *mirrorRadix) hashes(tokens []uint32) ([]kv.LocalHash, []kv.SeqHash) {
	return kv.BlockHashes(tokens, m.page, nil, nil)
}

// lease is a request's KV as Dynamo's allocate_for_request leaves it: its
// matched prefix locked, fresh pages private.
type lease struct {
	tokens []uint32
	prefix int   // matched pages
	last   int32 // deepest locked node
	pages  []int32
}

// alloc is allocate_for_request: match the full pages of tokens, lock the
// match, and take private pages for the rest (a partial last page
// included). ok is false, with nothing taken, when the pages cannot be had
// even by eviction.
func (m *mirrorRadix) alloc(tokens []uint32) (*lease, bool) {
	m.t.Helper()
	_, seqs := m.hashes(tokens)
	n, last := m.c.match(seqs)
	m.c.lock(last)
	l := &lease{tokens: tokens, prefix: n, last: last}
	for range ceilDiv(len(tokens), m.page) - n {
		s, ok := m.c.alloc()
		if !ok {
			for _, p := range l.pages {
				m.c.release(p)
			}
			m.c.unlock(last)
			return nil, false
		}
		l.pages = append(l.pages, s)
	}
	require.NoError(m.t, m.c.audit())
	return l, true
}

// cache is cache_unfinished_req: the lease's full pages join the tree
// (duplicates of cached pages are freed) and its lock moves down to them.
func (m *mirrorRadix) cache(l *lease) {
	m.t.Helper()
	locals, seqs := m.hashes(l.tokens)
	for i := l.prefix; i < len(seqs); i++ {
		l.last = m.c.extend(l.last, l.pages[0], seqs[i], locals[i], i)
		l.pages = l.pages[1:]
	}
	l.prefix = len(seqs)
	require.NoError(m.t, m.c.audit())
}

// grow is extend_allocation by one page: the lease now covers tokens, its
// new page taken fresh. It reports whether the page could be had.
func (m *mirrorRadix) grow(l *lease, tokens []uint32) bool {
	s, ok := m.c.alloc()
	if ok {
		l.tokens, l.pages = tokens, append(l.pages, s)
	}
	return ok
}

// chunked is a request for tokens (two pages) whose first page is
// allocated and cached before it grows to the second, as a chunked
// prefill's lease does.
func (m *mirrorRadix) chunked(tokens []uint32) *lease {
	m.t.Helper()
	l, ok := m.alloc(tokens[:m.page])
	require.True(m.t, ok)
	m.cache(l)
	require.True(m.t, m.grow(l, tokens), "the second page fits")
	return l
}

// finish is cache_finished_req: cache the full pages, free a partial last
// page, and unlock.
func (m *mirrorRadix) finish(l *lease) {
	m.t.Helper()
	m.cache(l)
	m.retract(l)
}

// retract frees the lease's private pages and unlocks its cached path,
// which stays in the tree, evictable.
func (m *mirrorRadix) retract(l *lease) {
	m.t.Helper()
	for _, p := range l.pages {
		m.c.release(p)
	}
	l.pages = nil
	m.c.unlock(l.last)
	require.NoError(m.t, m.c.audit())
}

// insert is RadixCache::insert: tokens' full pages cached, unlocked.
func (m *mirrorRadix) insert(tokens []uint32) {
	m.t.Helper()
	l, ok := m.alloc(tokens[:len(tokens)/m.page*m.page])
	require.True(m.t, ok)
	m.finish(l)
}

// match is match_prefix's length in tokens, and the deepest matched node.
func (m *mirrorRadix) match(tokens []uint32) (int, int32) {
	_, seqs := m.hashes(tokens)
	n, last := m.c.match(seqs)
	return n * m.page, last
}

// evict is RadixCache::evict: least recently unlocked leaves first, until
// tokens are evicted or nothing is evictable. It returns the tokens
// evicted.
func (m *mirrorRadix) evict(tokens int) int {
	m.t.Helper()
	n := 0
	for n < tokens && len(m.c.heap) > 0 {
		m.c.evict(m.c.heap[0])
		n += m.page
	}
	require.NoError(m.t, m.c.audit())
	return n
}

// touch is a match_prefix that refreshes a path's access time.
func (m *mirrorRadix) touch(tokens []uint32) {
	_, last := m.match(tokens)
	m.c.lock(last)
	m.c.unlock(last)
}

// events takes the events recorded since the last call, as a pass does:
// stores chained one after another within one call share an event.
func (m *mirrorRadix) events() []kv.Event {
	var r record
	r.add(&Output{KVEvents: m.c.ev.flush(nil)})
	m.c.ev.reset()
	return r.kvEvents
}

func toks(ids ...uint32) []uint32 { return ids }

// --- radix_cache.rs ---

// test_token_pool_allocate_and_free: a pool of 10 gives 3 then 7 pages,
// none more, and takes them back.
func TestDynamo_TokenPoolAllocateAndFree(t *testing.T) {
	c := newRadixCache(10, false)
	take := func(n int) []int32 {
		var out []int32
		for range n {
			s, ok := c.alloc()
			require.True(t, ok)
			out = append(out, s)
		}
		return out
	}
	a := take(3)
	assert.Len(t, c.free, 7)
	b := take(7)
	assert.Empty(t, c.free)
	_, ok := c.alloc()
	assert.False(t, ok)
	for _, s := range a {
		c.release(s)
	}
	assert.Len(t, c.free, 3)
	for _, s := range b {
		c.release(s)
	}
	assert.Len(t, c.free, 10)
	require.NoError(t, c.audit())
}

// test_match_prefix_empty_tree: nothing matches, at the root.
func TestDynamo_MatchPrefixEmptyTree(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	n, last := m.match(toks(1, 2, 3))
	assert.Zero(t, n)
	assert.Equal(t, int32(noSlot), last)
}

// test_match_prefix_full_match.
func TestDynamo_MatchPrefixFullMatch(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	m.insert(toks(1, 2, 3, 4, 5))
	n, _ := m.match(toks(1, 2, 3, 4, 5))
	assert.Equal(t, 5, n)
}

// test_match_prefix_with_split: [1..7] cached, [1..5, 9, 9] matches 5, and
// the pages after the divergence stay cached under the fifth (Dynamo
// splits the edge there).
func TestDynamo_MatchPrefixWithSplit(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	m.insert(toks(1, 2, 3, 4, 5, 6, 7))
	n, last := m.match(toks(1, 2, 3, 4, 5, 9, 9))
	assert.Equal(t, 5, n)
	n7, last7 := m.match(toks(1, 2, 3, 4, 5, 6, 7))
	assert.Equal(t, 7, n7)
	assert.Equal(t, last, m.c.nodes[m.c.nodes[last7].parent].parent, "6 and 7 hang under 5")
}

// test_insert_shared_prefix.
func TestDynamo_InsertSharedPrefix(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	m.insert(toks(1, 2, 3, 4, 5))
	m.insert(toks(1, 2, 3, 6, 7))
	for _, tc := range []struct {
		q    []uint32
		want int
	}{{toks(1, 2, 3, 4, 5), 5}, {toks(1, 2, 3, 6, 7), 5}, {toks(1, 2, 3, 9), 3}} {
		n, _ := m.match(tc.q)
		assert.Equal(t, tc.want, n, "%v", tc.q)
	}
}

// test_insert_extends_existing.
func TestDynamo_InsertExtendsExisting(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	m.insert(toks(1, 2, 3))
	m.insert(toks(1, 2, 3, 4, 5))
	n, _ := m.match(toks(1, 2, 3, 4, 5))
	assert.Equal(t, 5, n)
}

// test_insert_duplicate: inserting [1, 2, 3] twice adds nothing the second
// time. Dynamo counts 2 nodes (the root and one edge of 3 tokens); mocker
// keeps a node per page, 3, and the second insertion's pages go back to
// the free list with no Stored event.
func TestDynamo_InsertDuplicate(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	m.insert(toks(1, 2, 3))
	require.Len(t, storedHashes(m.events()), 3)
	m.insert(toks(1, 2, 3))
	assert.Equal(t, 3, m.c.inTree)
	assert.Len(t, m.c.free, 97)
	assert.Empty(t, m.events())
}

// test_match_then_insert_suffix.
func TestDynamo_MatchThenInsertSuffix(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	m.insert(toks(1, 2, 3, 4, 5))
	n, _ := m.match(toks(1, 2, 3, 4, 5, 6, 7, 8))
	assert.Equal(t, 5, n)
	m.insert(toks(1, 2, 3, 4, 5, 6, 7, 8))
	n, _ = m.match(toks(1, 2, 3, 4, 5, 6, 7, 8))
	assert.Equal(t, 8, n)
}

// test_page_insert_and_match: 100 tokens in pages of 4 are 25 pages; 7
// tokens cache one page, 8 tokens two.
func TestDynamo_PageInsertAndMatch(t *testing.T) {
	m := newMirrorRadix(t, 100, 4)
	assert.Len(t, m.c.nodes, 25)
	m.insert(toks(1, 2, 3, 4, 5, 6, 7))
	n, _ := m.match(toks(1, 2, 3, 4))
	assert.Equal(t, 4, n)
	assert.Equal(t, 1, m.c.inTree, "one page")
	m.insert(toks(1, 2, 3, 4, 5, 6, 7, 8))
	n, _ = m.match(toks(1, 2, 3, 4, 5, 6, 7, 8))
	assert.Equal(t, 8, n)
}

// test_page_children_disambiguate: pages differing in their last token are
// different children; a third differing one matches nothing.
func TestDynamo_PageChildrenDisambiguate(t *testing.T) {
	m := newMirrorRadix(t, 100, 4)
	m.insert(toks(1, 2, 3, 4))
	m.insert(toks(1, 2, 3, 5))
	for _, tc := range []struct {
		q    []uint32
		want int
	}{{toks(1, 2, 3, 4), 4}, {toks(1, 2, 3, 5), 4}, {toks(1, 2, 3, 6), 0}} {
		n, _ := m.match(tc.q)
		assert.Equal(t, tc.want, n, "%v", tc.q)
	}
}

// test_page_split_value: two pages cached; a query diverging in the second
// page matches the first, whose node holds the first page.
func TestDynamo_PageSplitValue(t *testing.T) {
	m := newMirrorRadix(t, 100, 4)
	m.insert(toks(1, 2, 3, 4, 5, 6, 7, 8))
	_, last8 := m.match(toks(1, 2, 3, 4, 5, 6, 7, 8))
	n, node := m.match(toks(1, 2, 3, 4, 9, 9, 9, 9))
	assert.Equal(t, 4, n)
	assert.Equal(t, m.c.nodes[last8].parent, node)
	_, seqs := m.hashes(toks(1, 2, 3, 4))
	assert.Equal(t, seqs[0], m.c.nodes[node].hash)
}

// test_lock_unlock_shared_prefix: two paths sharing 3 tokens, both locked:
// 7 protected (2 + 2 + 3); unlocking one makes its leaf evictable,
// unlocking both protects nothing.
func TestDynamo_LockUnlockSharedPrefix(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	m.insert(toks(1, 2, 3, 4, 5))
	m.insert(toks(1, 2, 3, 6, 7))
	_, a := m.match(toks(1, 2, 3, 4, 5))
	_, b := m.match(toks(1, 2, 3, 6, 7))
	m.c.lock(a)
	m.c.lock(b)
	assert.Equal(t, 7, m.c.protected())
	m.c.unlock(a)
	assert.NotEqual(t, int32(noSlot), m.c.nodes[a].heap, "a's leaf is evictable")
	m.c.unlock(b)
	assert.Zero(t, m.c.protected())
	require.NoError(t, m.c.audit())
}

// test_evict_lru_order: of two unlocked paths, the one unlocked first is
// evicted first.
func TestDynamo_EvictLRUOrder(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	m.insert(toks(1, 2, 3))
	m.touch(toks(1, 2, 3))
	m.insert(toks(4, 5, 6))
	m.touch(toks(4, 5, 6))
	assert.Equal(t, 3, m.evict(3))
	n, _ := m.match(toks(1, 2, 3))
	assert.Zero(t, n, "oldest evicted")
	n, _ = m.match(toks(4, 5, 6))
	assert.Equal(t, 3, n, "newer kept")
}

// test_evict_respects_locks: asked for 6 tokens, eviction takes the 3 of
// the unlocked path only.
func TestDynamo_EvictRespectsLocks(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	m.insert(toks(1, 2, 3))
	m.insert(toks(4, 5, 6))
	_, locked := m.match(toks(1, 2, 3))
	m.c.lock(locked)
	m.touch(toks(4, 5, 6))
	assert.Equal(t, 3, m.evict(6))
	n, _ := m.match(toks(1, 2, 3))
	assert.Equal(t, 3, n)
}

// test_query_methods: 100 tokens available of 100, in pages of 1 or 4.
func TestDynamo_QueryMethods(t *testing.T) {
	for _, page := range []int{1, 4} {
		m := newMirrorRadix(t, 100, page)
		assert.Equal(t, 100, m.c.available()*page)
		assert.Equal(t, 100, len(m.c.nodes)*page)
	}
}

// --- sglang_backend.rs ---

// test_allocate_cache_miss: 5 fresh tokens take 5 pages of 100.
func TestDynamo_AllocateCacheMiss(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	l, ok := m.alloc(toks(1, 2, 3, 4, 5))
	require.True(t, ok)
	assert.Zero(t, l.prefix)
	assert.Len(t, l.pages, 5)
	assert.Len(t, m.c.free, 95)
}

// test_allocate_cache_hit: after [1..5] is cached, [1..7] reuses 5 pages
// and takes 2: 93 left.
func TestDynamo_AllocateCacheHit(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	l, ok := m.alloc(toks(1, 2, 3, 4, 5))
	require.True(t, ok)
	m.finish(l)
	l2, ok := m.alloc(toks(1, 2, 3, 4, 5, 6, 7))
	require.True(t, ok)
	assert.Equal(t, 5, l2.prefix)
	assert.Equal(t, 7, l2.prefix+len(l2.pages))
	assert.Len(t, m.c.free, 93)
}

// test_allocate_oom: a full pool of 3 refuses 3 more pages.
func TestDynamo_AllocateOOM(t *testing.T) {
	m := newMirrorRadix(t, 3, 1)
	_, ok := m.alloc(toks(1, 2, 3))
	require.True(t, ok)
	_, ok = m.alloc(toks(4, 5, 6))
	assert.False(t, ok)
	assert.Empty(t, m.c.free)
}

// test_event_publishing: caching 3 fresh pages is one Stored event; a full
// hit on them publishes nothing.
func TestDynamo_EventPublishing(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	l, ok := m.alloc(toks(1, 2, 3))
	require.True(t, ok)
	m.finish(l)
	ev := m.events()
	require.Len(t, ev, 1)
	assert.Len(t, ev[0].Blocks, 3)
	l2, ok := m.alloc(toks(1, 2, 3))
	require.True(t, ok)
	assert.Equal(t, 3, l2.prefix)
	m.finish(l2)
	assert.Empty(t, m.events())
}

// test_event_publishing_uses_router_block_hashes: a 6-token prompt on an
// SGLang worker with pages of 4 stores one block whose hashes are the
// router's: XXH3 (seed 1337) over tokens 1..4, chained from nothing.
func TestDynamo_EventPublishingUsesRouterBlockHashes(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(25, 4, 16), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: toks(1, 2, 3, 4, 5, 6), MaxTokens: 1}, Release))
		driveAll(t, w, &r, 0)
		require.Len(t, r.kvEvents, 1)
		require.Len(t, r.kvEvents[0].Blocks, 1)
		b := r.kvEvents[0].Blocks[0]
		local := kv.HashTokens([]uint32{1, 2, 3, 4})
		assert.Equal(t, local, b.TokensHash)
		assert.Equal(t, kv.SeqHash(local), b.Hash, "a first block's sequence hash is its local hash")
		assert.False(t, r.kvEvents[0].HasParent)
	})
}

// test_published_prefix_hashes_only_unseen_suffix: caching [1..4], then,
// in a later pass, [1..8], publishes one block each, the second chained to the first;
// caching [1..8] again publishes nothing.
func TestDynamo_PublishedPrefixHashesOnlyUnseenSuffix(t *testing.T) {
	m := newMirrorRadix(t, 16, 4)
	m.insert(toks(1, 2, 3, 4))
	ev := m.events() // one pass each
	m.insert(toks(1, 2, 3, 4, 5, 6, 7, 8))
	ev = append(ev, m.events()...)
	require.Len(t, ev, 2)
	assert.Len(t, ev[0].Blocks, 1)
	assert.Len(t, ev[1].Blocks, 1)
	assert.True(t, ev[1].HasParent)
	assert.Equal(t, ev[0].Blocks[0].Hash, ev[1].Parent)
	m.insert(toks(1, 2, 3, 4, 5, 6, 7, 8))
	assert.Empty(t, m.events())
}

// test_cache_materialization_processes_only_newly_completed_blocks: pages
// of 2; caching tokens 1..2, then 1..4, then finishing 1..6 stores only
// the newly completed block each time.
func TestDynamo_CacheMaterializationProcessesOnlyNewlyCompletedBlocks(t *testing.T) {
	m := newMirrorRadix(t, 100, 2)
	l, ok := m.alloc(toks(1, 2))
	require.True(t, ok)
	m.cache(l)
	m.events()
	for _, upTo := range []int{4, 6} {
		tokens := toks(1, 2, 3, 4, 5, 6)[:upTo]
		s, ok := m.c.alloc()
		require.True(t, ok)
		l.tokens, l.pages = tokens, append(l.pages, s)
		if upTo == 6 {
			m.finish(l)
		} else {
			m.cache(l)
		}
		ev := m.events()
		require.Len(t, ev, 1, "up to %d", upTo)
		assert.Len(t, ev[0].Blocks, 1, "only the newly completed block")
	}
}

// test_duplicate_logical_blocks_publish_once_and_remove_once: two
// requests take pages for [1, 2, 3] before either is cached; the block is
// announced once (Dynamo at allocation, mocker when the first is cached:
// the second finds the pages cached and frees its own), and removed once,
// one event of 3 blocks, when it is evicted.
func TestDynamo_DuplicateLogicalBlocksPublishOnceAndRemoveOnce(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	r1, ok := m.alloc(toks(1, 2, 3))
	require.True(t, ok)
	r2, ok := m.alloc(toks(1, 2, 3))
	require.True(t, ok)
	assert.Len(t, m.c.free, 94, "both allocate before either is cached")
	m.finish(r1)
	m.finish(r2)
	ev := m.events()
	require.Len(t, ev, 1)
	assert.Len(t, ev[0].Blocks, 3)
	assert.Len(t, m.c.free, 97, "the duplicate's pages were returned")
	m.evict(3)
	ev = m.events()
	require.Equal(t, 1, removedEventCount(ev))
	assert.Len(t, ev[0].RemovedHashes, 3)
}

// test_duplicate_completion_releases_unretained_indices_and_removes_on_eviction:
// two requests take pages for [1, 2, 3] before either is cached (94 of 100
// left). Dynamo announces the 3 blocks, once, at the allocation; mocker
// when the first request completes and caches them. The first completion
// keeps its pages and removes nothing; the second, a duplicate, announces
// and removes nothing and returns its 3 pages (97 free). The router then
// holds all 3 blocks; evicting them is one Removed event of 3, and the
// router holds none.
func TestDynamo_DuplicateCompletionReleasesUnretainedIndicesAndRemovesOnEviction(t *testing.T) {
	m := newMirrorRadix(t, 100, 1)
	chain := newEventChain(t)
	tokens := toks(1, 2, 3)
	r1, ok := m.alloc(tokens)
	require.True(t, ok)
	r2, ok := m.alloc(tokens)
	require.True(t, ok)
	assert.Len(t, m.c.free, 94, "both allocate before either is cached")
	alloc := m.events()
	assert.Zero(t, storedEventCount(alloc), "nothing announced at allocation (Dynamo: 1)")

	m.finish(r1)
	first := m.events()
	assert.Equal(t, 1, storedEventCount(first), "the blocks are announced when cached (Dynamo: 0, announced before)")
	assert.Zero(t, removedEventCount(first))
	assert.Len(t, m.c.free, 94, "the first completion keeps its pages")
	query := storedHashes(first)
	require.Len(t, query, len(tokens))
	chain.apply(first)

	m.finish(r2)
	second := m.events()
	assert.Zero(t, storedEventCount(second))
	assert.Zero(t, removedEventCount(second))
	assert.Len(t, m.c.free, 97, "the duplicate's pages return to the pool")
	chain.apply(second)
	assert.Equal(t, 3, chain.overlap(query))

	m.evict(len(tokens))
	evicted := m.events()
	require.Equal(t, 1, removedEventCount(evicted))
	assert.Len(t, evicted[0].RemovedHashes, 3)
	chain.apply(evicted)
	assert.Zero(t, chain.overlap(query))
}

// unfinished_duplicate_canonicalization_prevents_missing_parent: pages of
// 4 in a pool of 32 tokens. [1..4] is cached; two requests for [1..8]
// match it and take distinct private pages for the second page. Caching
// both moves the duplicate onto the tree's page (one path for both) and
// frees its own: 24 tokens free, its old page no longer its. With the
// duplicate retracted, the first finished and both pages evicted, [1..4]
// is cached again, and [1..12] then announces its two missing pages in one
// Stored event chained to [1..4], which the router accepts (no block left
// behind by the duplicate suppresses the second page). Dynamo announces
// that event at the allocation, mocker when the pages are cached. Not
// mirrored: the results of the retraction and of the final abort.
func TestDynamo_UnfinishedDuplicateCanonicalizationPreventsMissingParent(t *testing.T) {
	m := newMirrorRadix(t, 32, 4)
	chain := newEventChain(t)
	seed := toks(1, 2, 3, 4)
	l, ok := m.alloc(seed)
	require.True(t, ok)
	m.finish(l)
	chain.apply(m.events())

	shared := toks(1, 2, 3, 4, 5, 6, 7, 8)
	first, ok := m.alloc(shared)
	require.True(t, ok)
	dup, ok := m.alloc(shared)
	require.True(t, ok)
	require.Len(t, first.pages, 1)
	require.Len(t, dup.pages, 1)
	dupPage := dup.pages[0]
	assert.NotEqual(t, first.pages, dup.pages, "distinct private pages for the same block")
	chain.apply(m.events())

	m.cache(first)
	m.cache(dup)
	assert.Equal(t, first.last, dup.last, "the duplicate now ends on the tree's page")
	assert.Equal(t, 24, len(m.c.free)*4)
	assert.Empty(t, dup.pages)
	assert.Contains(t, m.c.free, dupPage, "its own page was returned")
	chain.apply(m.events())

	m.retract(dup)
	m.finish(first)
	m.evict(len(seed))
	m.evict(len(seed))
	chain.apply(m.events())
	assert.Len(t, m.c.free, 8)

	restored, ok := m.alloc(seed)
	require.True(t, ok)
	m.finish(restored)
	chain.apply(m.events())

	extended, ok := m.alloc(toks(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12))
	require.True(t, ok)
	assert.Zero(t, storedEventCount(m.events()), "nothing announced at allocation (Dynamo: 1)")
	m.cache(extended)
	ext := m.events()
	require.Equal(t, 1, storedEventCount(ext))
	assert.Len(t, ext[0].Blocks, 2, "both missing pages announced")
	chain.apply(ext)
	m.retract(extended)
}

// retained_tail_split_releases_leases_before_eviction: pages of 4 in a
// pool of 16 tokens. A request caches [1..4], grows to [1..8] (its second
// page fits) and caches that; a second request for [1..4, 9..12] matches
// the first page and caches its own second page. Once the first finishes
// and the second is retracted, nothing is protected and all 12 cached
// tokens are evictable; evicting 12 frees the whole pool and leaves the
// tree empty, and the router accepts every event on the way. Not mirrored:
// the node counts and deepest nodes of Dynamo's compressed tree (mocker's
// has a node per page) and retract's result.
func TestDynamo_RetainedTailSplitReleasesLeasesBeforeEviction(t *testing.T) {
	m := newMirrorRadix(t, 16, 4)
	chain := newEventChain(t)
	first := m.chunked(toks(1, 2, 3, 4, 5, 6, 7, 8))
	m.cache(first)
	chain.apply(m.events())

	second, ok := m.alloc(toks(1, 2, 3, 4, 9, 10, 11, 12))
	require.True(t, ok)
	assert.Equal(t, 4, second.prefix*4)
	m.cache(second)
	chain.apply(m.events())

	m.finish(first)
	m.retract(second)
	assert.Zero(t, m.c.protected())
	assert.Equal(t, 12, m.c.evictable*4)

	assert.Equal(t, 12, m.evict(12))
	chain.apply(m.events())
	assert.Equal(t, 16, len(m.c.free)*4)
	assert.Zero(t, m.c.protected())
	assert.Zero(t, m.c.evictable)
	assert.Zero(t, m.c.inTree, "only the root is left")
}

// retained_tail_eviction_preserves_page_granular_prefix_reuse: 8 tokens
// cached in a pool of 8 (2 pages, both announced); evicting 4 tokens
// removes one block, the tail, and the first page still matches.
func TestDynamo_RetainedTailEvictionPreservesPageGranularPrefixReuse(t *testing.T) {
	m := newMirrorRadix(t, 8, 4)
	chain := newEventChain(t)
	tokens := toks(1, 2, 3, 4, 5, 6, 7, 8)
	m.finish(m.chunked(tokens))
	stored := m.events()
	query := storedHashes(stored)
	require.Len(t, query, 2)
	chain.apply(stored)
	assert.Equal(t, 2, chain.overlap(query))
	assert.Equal(t, 8, m.c.evictable*4)
	assert.Empty(t, m.c.free)

	m.evict(4)
	removed := m.events()
	require.Equal(t, 1, removedEventCount(removed))
	assert.Len(t, removed[0].RemovedHashes, 1)
	chain.apply(removed)
	n, _ := m.match(tokens)
	assert.Equal(t, 4, n)
	assert.Equal(t, 4, m.c.evictable*4)
	assert.Zero(t, m.c.protected())
	assert.Len(t, m.c.free, 1)
	assert.Equal(t, 1, chain.overlap(query))
}

// fresh_allocation_protects_matched_prefix_before_eviction: on 3 pages of
// 4, [1..4] and [9..16] are cached and [1..4] is the least recently used;
// [1..8] matches it, and the page it needs is evicted from [9..16], never
// from the prefix it is about to use.
func TestDynamo_FreshAllocationProtectsMatchedPrefixBeforeEviction(t *testing.T) {
	m := newMirrorRadix(t, 12, 4)
	prefix, other := toks(1, 2, 3, 4), toks(9, 10, 11, 12, 13, 14, 15, 16)
	m.insert(prefix)
	m.insert(other)
	m.touch(other)
	n, _ := m.match(other)
	require.Equal(t, 8, n)
	require.Empty(t, m.c.free)

	l, ok := m.alloc(toks(1, 2, 3, 4, 5, 6, 7, 8))
	require.True(t, ok, "the protected prefix plus one evicted page fit")
	assert.Equal(t, 1, l.prefix)
	n, _ = m.match(prefix)
	assert.Equal(t, 4, n)
	assert.Empty(t, m.c.free)
}

// finish_drops_partial_tail_page_and_caches_compact_complete_page: 5
// tokens take 2 of 3 pages; finishing caches the full page and frees the
// partial one: 8 tokens free, a 4-token match.
func TestDynamo_FinishDropsPartialTailPageAndCachesCompactCompletePage(t *testing.T) {
	m := newMirrorRadix(t, 12, 4)
	tokens := toks(1, 2, 3, 4, 5)
	l, ok := m.alloc(tokens)
	require.True(t, ok)
	assert.Equal(t, 4, len(m.c.free)*4)
	m.finish(l)
	assert.Equal(t, 8, len(m.c.free)*4)
	n, _ := m.match(tokens)
	assert.Equal(t, 4, n)
	assert.Equal(t, 1, m.c.inTree)
}

// retract_lease_releases_only_the_uncached_suffix: a request with [1..4]
// cached and 2 more tokens on a private page is retracted: the private
// page is freed, the cached one stays evictable and matches.
func TestDynamo_RetractLeaseReleasesOnlyTheUncachedSuffix(t *testing.T) {
	m := newMirrorRadix(t, 16, 4)
	l, ok := m.alloc(toks(1, 2, 3, 4))
	require.True(t, ok)
	m.cache(l)
	s, ok := m.c.alloc()
	require.True(t, ok)
	l.tokens, l.pages = toks(1, 2, 3, 4, 5, 6), append(l.pages, s)
	m.retract(l)
	assert.Len(t, m.c.free, 3)
	assert.Zero(t, m.c.protected())
	assert.Equal(t, 4, m.c.evictable*4)
	n, _ := m.match(toks(1, 2, 3, 4))
	assert.Equal(t, 4, n)
}

// test_chunked_prefill_parent_hash: pages of 1; caching a first chunk of
// 3 tokens, then, in a later pass, the 6-token prompt, publishes two events: the first from
// the root, the second chained to the first's last block with only the 3
// new blocks, and the second allocation reuses the 3 cached tokens.
func TestDynamo_ChunkedPrefillParentHash(t *testing.T) {
	m := newMirrorRadix(t, 32, 1)
	tokens := toks(11, 22, 33, 44, 55, 66)
	l1, ok := m.alloc(tokens[:3])
	require.True(t, ok)
	m.cache(l1)
	ev := m.events() // the chunks are cached in different passes
	l2, ok := m.alloc(tokens)
	require.True(t, ok)
	reused := l2.prefix
	m.cache(l2)
	m.c.unlock(l1.last)
	ev = append(ev, m.events()...)
	require.Len(t, ev, 2)
	assert.False(t, ev[0].HasParent, "the first chunk starts at the root")
	assert.True(t, ev[1].HasParent)
	assert.Equal(t, ev[0].Blocks[len(ev[0].Blocks)-1].Hash, ev[1].Parent)
	assert.Len(t, ev[1].Blocks, 3, "only the new blocks")
	assert.Equal(t, 3, reused, "the second chunk reuses the cached first")
}
