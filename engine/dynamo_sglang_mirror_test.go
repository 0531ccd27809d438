package engine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// Mirrors of Dynamo's SGLang mocker unit tests (lib/mocker's
// scheduler/sglang tests: scheduling, core behaviour, router events,
// forward-pass figures, source holds and destination lifecycle), each
// named after the test it mirrors and run on a Worker under mocker's
// default and under dynamo_compat. Where the two differ the default's
// figure is asserted beside Dynamo's; under dynamo_compat every assertion
// is Dynamo's. docs/fidelity.md lists the tests that have no counterpart.

// dynamoSGLangArgs is Dynamo's SGLang test_args: an aggregated SGLang
// worker of blocks pages of pageSize tokens with the given chunk budget.
func dynamoSGLangArgs(blocks, pageSize, chunk int, mod ...func(*Args)) Args {
	return sglangArgs(blocks, append([]func(*Args){func(a *Args) {
		a.BlockSize = pageSize
		a.SGLang.PageSize = pageSize
		a.SGLang.ChunkedPrefillSize = chunk
	}}, mod...)...)
}

// eachSGLangCompat runs f as two subtests, mocker's default and
// dynamo_compat, on an SGLang worker built from args with the switch set.
func eachSGLangCompat(t *testing.T, args Args, f func(t *testing.T, compat bool, w *Worker)) {
	for _, compat := range []bool{false, true} {
		name := "default"
		if compat {
			name = "dynamo_compat"
		}
		t.Run(name, func(t *testing.T) {
			a := args
			sg := *a.SGLang
			a.SGLang = &sg
			a.DynamoCompat = compat
			f(t, compat, newWorker(t, a))
		})
	}
}

// storedHashes lists the sequence hashes of the blocks of every Stored
// event in events, in order (Dynamo's stored_hashes).
func storedHashes(events []kv.Event) []kv.SeqHash {
	var out []kv.SeqHash
	for _, e := range events {
		if e.Kind == kv.Stored {
			for _, b := range e.Blocks {
				out = append(out, b.Hash)
			}
		}
	}
	return out
}

// nthStoredHashes is Dynamo's nth_stored_hashes: the blocks of the n-th
// Stored event in events, or none.
func nthStoredHashes(events []kv.Event, n int) []kv.SeqHash {
	for _, e := range events {
		if e.Kind != kv.Stored {
			continue
		}
		if n == 0 {
			var out []kv.SeqHash
			for _, b := range e.Blocks {
				out = append(out, b.Hash)
			}
			return out
		}
		n--
	}
	return nil
}

func removedEventCount(events []kv.Event) int { return eventCount(events, kv.Removed) }

func storedEventCount(events []kv.Event) int { return eventCount(events, kv.Stored) }

func eventCount(events []kv.Event, kind kv.EventKind) int {
	n := 0
	for _, e := range events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// eventChain checks what Dynamo's router indexer harness checks when it
// applies a worker's events: every Stored event's parent is a block the
// worker announced and has not removed, no block is announced twice while
// present, and every Removed block was announced. It returns the blocks
// still announced.
type eventChain struct {
	t     *testing.T
	known map[kv.SeqHash]bool
}

func newEventChain(t *testing.T) *eventChain {
	return &eventChain{t: t, known: map[kv.SeqHash]bool{}}
}

func (c *eventChain) apply(events []kv.Event) {
	c.t.Helper()
	for _, e := range events {
		switch e.Kind {
		case kv.Stored:
			if e.HasParent {
				assert.True(c.t, c.known[e.Parent], "event %d: parent %x was not announced", e.ID, uint64(e.Parent))
			}
			for _, b := range e.Blocks {
				assert.False(c.t, c.known[b.Hash], "event %d: block %x announced twice", e.ID, uint64(b.Hash))
				c.known[b.Hash] = true
			}
		case kv.Removed:
			for _, h := range e.RemovedHashes {
				assert.True(c.t, c.known[h], "event %d: removed block %x was never announced", e.ID, uint64(h))
				delete(c.known, h)
			}
		}
	}
}

// overlap is how many of hashes, from the first, the chain still holds
// (the router's overlap for them).
func (c *eventChain) overlap(hashes []kv.SeqHash) int {
	n := 0
	for _, h := range hashes {
		if !c.known[h] {
			break
		}
		n++
	}
	return n
}

// occupiedPages is Dynamo's occupied_tokens in pages: every page that is
// not free, cached (evictable) pages included.
func occupiedPages(w *Worker) int {
	m := w.Metrics()
	return m.TotalBlocks - m.FreeBlocks
}

// --- scheduling ---

// test_sglang_scheduler_fifo_ordering: five 10-token requests for 3 tokens
// each on 100 pages of 64 all complete: 15 tokens.
func TestDynamo_SGLangSchedulerFIFOOrdering(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(100, 64, 8192), func(t *testing.T, _ bool, w *Worker) {
		var r record
		for i := range 5 {
			require.NoError(t, w.Submit(0, Request{ID: uint64(i), Tokens: repeatToken(uint32(i), 10), MaxTokens: 3}, Release))
		}
		driveAll(t, w, &r, 0)
		assert.Len(t, r.tokens, 15)
		require.Len(t, r.completions, 5)
	})
}

// dynamoLPMArgs is the lpm tests' worker: 1000 pages of 1 token under lpm,
// with the given chunk budget and running slots.
func dynamoLPMArgs(chunk, seqs int) Args {
	return dynamoSGLangArgs(1000, 1, chunk, func(a *Args) {
		a.SGLang.SchedulePolicy = SGLangPolicyLPM
		a.MaxNumSeqs = intp(seqs)
	})
}

// test_lpm_reorders_by_current_sequence_prefix_match: with [1..5] cached
// (page size 1), lpm puts the request whose sequence starts with it ahead
// of one that matches nothing. Dynamo's matching request is a retracted
// one, prompt [1..5] and outputs [6, 7]; here its whole sequence is the
// prompt. One running slot, so the first pass shows the order.
func TestDynamo_LPMReordersByCurrentSequencePrefixMatch(t *testing.T) {
	eachSGLangCompat(t, dynamoLPMArgs(8192, 1), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: []uint32{1, 2, 3, 4, 5}, MaxTokens: 1}, Release))
		now := driveAll(t, w, &r, 0)
		const noMatch, match = 2, 3
		require.NoError(t, w.Submit(now, Request{ID: noMatch, Tokens: []uint32{9, 8, 7}, MaxTokens: 1}, Release))
		require.NoError(t, w.Submit(now, Request{ID: match, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7}, MaxTokens: 1}, Release))
		out := stepOnce(t, w, &r, now)
		assert.Equal(t, []uint64{match}, tokenIDs(out))
		driveAll(t, w, &r, out.End)
		assert.Equal(t, noMatch, int(r.completions[len(r.completions)-1].RequestID))
	})
}

// test_lpm_deprioritizes_duplicate_short_prefixes: 33 requests of one
// 32-token prompt and a unique 32-token one behind them, lpm, pages of 1,
// nothing cached. Dynamo, like SGLang, moves the requests that share an
// uncached prefix with one already placed behind the rest, so the unique
// one comes second; mocker orders by cached prefix only (item 12), so the
// queue stays in arrival order. A chunk budget of 64 tokens admits the
// first two of the order in the first pass: Dynamo's a duplicate and the
// unique one, mocker's two duplicates, by default and under dynamo_compat.
func TestDynamo_LPMDeprioritizesDuplicateShortPrefixes(t *testing.T) {
	eachSGLangCompat(t, dynamoLPMArgs(64, 64), func(t *testing.T, _ bool, w *Worker) {
		var r record
		for id := range uint64(33) {
			require.NoError(t, w.Submit(0, Request{ID: id + 1, Tokens: seqTokens(0, 32), MaxTokens: 1}, Release))
		}
		const unique = 100
		require.NoError(t, w.Submit(0, Request{ID: unique, Tokens: seqTokens(100, 32), MaxTokens: 1}, Release))
		out := stepOnce(t, w, &r, 0)
		assert.Equal(t, []uint64{1, 2}, tokenIDs(out), "arrival order (Dynamo: a duplicate, then the unique one)")
	})
}

// --- core behaviour ---

// cancellation_releases_noncanonical_cached_prefix_indices: after a seed
// request completes, every page is free or evictable; a second request
// with the same prompt runs until its cached path reaches past the prompt
// (an output page), and cancelling it leaves every page free or evictable
// again. Dynamo plans both requests' outputs alike; here each generates
// its own, so the second caches output pages of its own.
func TestDynamo_CancellationReleasesNoncanonicalCachedPrefixIndices(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(32, 4, 32), func(t *testing.T, _ bool, w *Worker) {
		var r record
		prompt := seqTokens(0, 8)
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 8}, Release))
		now := driveAll(t, w, &r, 0)
		require.Len(t, r.completions, 1, "the seed request completes")
		assert.Zero(t, w.Metrics().ActiveBlocks, "every page free or evictable")

		require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: prompt, MaxTokens: 8}, Release))
		g := sgOf(w)
		for i := 0; ; i++ {
			require.Less(t, i, 32, "the second request never cached an output page")
			if r2 := g.req(2); r2 != nil && r2.depth*4 > len(prompt) {
				break
			}
			now = stepOnce(t, w, &r, now).End
		}
		require.True(t, w.Cancel(now, 2))
		m := w.Metrics()
		assert.Zero(t, m.ActiveBlocks, "cancellation leaves every page free or evictable")
		assert.Equal(t, m.TotalBlocks, m.FreeBlocks+m.InactiveBlocks)
	})
}

// test_chunked_prefill_budget_is_page_aware: a 6-token prompt under an
// 8-token chunk budget on pages of 4 is prefilled whole in one pass and
// takes 2 pages (8 tokens allocated).
func TestDynamo_ChunkedPrefillBudgetIsPageAware(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(2500, 4, 8), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: repeatToken(1, 6), MaxTokens: 3}, Release))
		out := stepOnce(t, w, &r, 0)
		assert.Equal(t, 6, out.PrefillTokens, "materialized 6")
		assert.Equal(t, 2, w.Metrics().ActiveBlocks, "allocated 8 tokens")
	})
}

// test_chunked_prefill_admits_next_chunk_when_full_prompt_does_not_fit: a
// 16-token prompt on a pool of 12 tokens (3 pages of 4), chunk budget 8.
// Dynamo admits an 8-token chunk. Its next chunk never fits beside the
// first (8 more tokens and its output against 4 free), so Dynamo leaves
// it at the head of the queue, holding the first chunk's 2 pages, for as
// long as it is not cancelled; dynamo_compat does the same. By default
// mocker refuses it at once (never_fits): prompt and output need 5 pages.
func TestDynamo_ChunkedPrefillAdmitsNextChunkWhenFullPromptDoesNotFit(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(3, 4, 8), func(t *testing.T, compat bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: repeatToken(1, 16), MaxTokens: 2}, Release))
		out := step(t, w, &r, 0)
		if !compat {
			require.Len(t, r.rejections, 1)
			assert.Equal(t, RejectNeverFits, r.rejections[0].Code)
			assert.Zero(t, out.PrefillTokens)
			assert.Zero(t, w.Metrics().ActiveBlocks)
			return
		}
		assert.Empty(t, r.rejections)
		assert.Equal(t, 8, out.PrefillTokens, "an 8-token chunk")
		assert.Equal(t, 2, w.Metrics().ActiveBlocks)

		// What follows: no pass can run; the request waits, holding its
		// chunk, and the worker parks.
		now := drive(t, w, &r, out.End)
		passes := w.Passes()
		assert.Nil(t, w.Step(now+1000))
		assert.Equal(t, passes, w.Passes())
		m := w.Metrics()
		assert.Equal(t, 1, m.Waiting)
		assert.Equal(t, 2, m.ActiveBlocks)
		assert.Empty(t, r.completions)
		require.True(t, w.Cancel(now+1000, 1))
		assert.Zero(t, w.Metrics().ActiveBlocks)
	})
}

// test_chunked_prefill_subpage_budget_defers_next_request: a 7-token
// prompt leaves less than a page of an 8-token chunk budget, so the
// 8-token request behind it waits for the next pass.
func TestDynamo_ChunkedPrefillSubpageBudgetDefersNextRequest(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(2500, 4, 8), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: repeatToken(1, 7), MaxTokens: 3}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: repeatToken(2, 8), MaxTokens: 3}, Release))
		out := stepOnce(t, w, &r, 0)
		assert.Equal(t, []uint64{1}, tokenIDs(out))
		assert.Equal(t, 7, out.PrefillTokens)
		assert.Equal(t, 1, w.Metrics().Waiting)
		assert.Equal(t, uint64(2), sgOf(w).waiting[0].id)
	})
}

// test_decode_allocation_is_page_aware: a 6-token prompt on pages of 4
// (8 tokens allocated) samples tokens 1, 2 and 3 with 8, 8 and 12 tokens
// allocated: the third token opens a page. Dynamo's first step is the
// sampling step of the extend pass here. By default mocker takes a
// token's slot one step later, when its KV is computed, so the third pass
// still has 8 and the fourth opens the page.
func TestDynamo_DecodeAllocationIsPageAware(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(16, 4, 8192), func(t *testing.T, compat bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 6), MaxTokens: 5}, Release))
		now := 0.0
		var pages []int
		for range 4 {
			out := stepOnce(t, w, &r, now)
			require.Len(t, out.Tokens, 1)
			now = out.End
			pages = append(pages, w.Metrics().ActiveBlocks)
		}
		if compat {
			assert.Equal(t, []int{2, 2, 3, 3}, pages)
		} else {
			assert.Equal(t, []int{2, 2, 2, 3}, pages)
		}
	})
}

// test_decode_speedup_ratio_scales_sglang_decode_time: decode_speedup_ratio
// 4 makes a decode step four times shorter.
func TestDynamo_DecodeSpeedupRatioScalesSGLangDecodeTime(t *testing.T) {
	for _, compat := range []bool{false, true} {
		decodeMs := func(ratio float64) float64 {
			w := newWorker(t, dynamoSGLangArgs(16, 4, 8192, func(a *Args) {
				a.DecodeSpeedupRatio = ratio
				a.DynamoCompat = compat
			}))
			var r record
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 4), MaxTokens: 4}, Release))
			first := stepOnce(t, w, &r, 0)
			return stepOnce(t, w, &r, first.End).DecodeMs
		}
		base, fast := decodeMs(1), decodeMs(4)
		assert.Greater(t, base, fast)
		assert.InDelta(t, 4, base/fast, 1e-3, "dynamo_compat %v", compat)
	}
}

// test_check_decode_mem_preserves_generated_output_on_retract: when the
// pool cannot grow, the running request with the fewest output tokens is
// retracted; it keeps its output tokens and gives up its KV.
func TestDynamo_CheckDecodeMemPreservesGeneratedOutputOnRetract(t *testing.T) {
	args := dynamoSGLangArgs(4, 4, 8192, func(a *Args) { a.SGLang.ClipMaxNewTokens = 1 })
	eachSGLangCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 4), MaxTokens: 10}, Release))
		now := stepOnce(t, w, &r, 0).End
		now = stepOnce(t, w, &r, now).End
		require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: seqTokens(9, 4), MaxTokens: 10}, Release))
		g := sgOf(w)
		outs := map[uint64]int{}
		for i := 0; ; i++ {
			require.Less(t, i, 40, "nobody was retracted")
			for _, id := range []uint64{1, 2} {
				if q := g.req(id); q != nil {
					outs[id] = q.out
				}
			}
			out := stepOnce(t, w, &r, now)
			now = out.End
			if ev := r.eventsOf(EventPreempted); len(ev) > 0 {
				v := g.req(ev[0].RequestID)
				require.NotNil(t, v)
				assert.Equal(t, uint64(2), v.id, "the request with fewer outputs")
				assert.Less(t, outs[2], outs[1])
				assert.Equal(t, outs[v.id], v.out, "its output tokens are kept")
				assert.Zero(t, v.kvLen, "materialized 0")
				assert.Empty(t, v.pages, "no KV left")
				return
			}
		}
	})
}

// test_unfinished_decode_request_is_cached_after_output: after the first
// token of a 4-token prompt, the prompt is cached: a 4-token match.
func TestDynamo_UnfinishedDecodeRequestIsCachedAfterOutput(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(16, 4, 8192), func(t *testing.T, _ bool, w *Worker) {
		var r record
		prompt := []uint32{1, 2, 3, 4}
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 4}, Release))
		stepOnce(t, w, &r, 0)
		_, seqs := kv.BlockHashes(prompt, 4, nil, nil)
		n, _ := sgOf(w).cache.match(seqs)
		assert.Equal(t, 4, n*4)
	})
}

// test_active_decode_blocks_tracks_page_reserved_occupancy_in_blocks: a
// 6-token prompt for 2 tokens, after its first pass: not complete, 2
// active pages.
func TestDynamo_ActiveDecodeBlocksTracksPageReservedOccupancyInBlocks(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(32, 4, 8), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: repeatToken(1, 6), MaxTokens: 2}, Release))
		stepOnce(t, w, &r, 0)
		assert.Empty(t, r.completions)
		assert.Equal(t, 2, w.Metrics().ActiveBlocks)
	})
}

// test_sglang_pass_visibility_is_pass_end: a pass's KV events leave with
// its Output, at its end, on rank 0.
func TestDynamo_SGLangPassVisibilityIsPassEnd(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(32, 4, 4), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: []uint32{1, 2, 3, 4}, MaxTokens: 1}, Release))
		out := stepOnce(t, w, &r, 0)
		require.NotEmpty(t, out.KVEvents)
		for _, e := range out.KVEvents {
			assert.Zero(t, e.DPRank)
		}
	})
}

// --- router events ---

// test_chunked_prefill_events_apply_cleanly: a 6-token prompt for 2 tokens
// in chunks of 4. Dynamo's first pass stores the first page, and its third
// (the last token's) stores the second, prompt tokens 5 and 6 with both
// outputs: 2 pages in all. By default mocker stores only the first: the
// second page's last token is never computed.
func TestDynamo_ChunkedPrefillEventsApplyCleanly(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(32, 4, 4), func(t *testing.T, compat bool, w *Worker) {
		var r record
		chain := newEventChain(t)
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: []uint32{1, 2, 3, 4, 5, 6}, MaxTokens: 2}, Release))
		pass1 := stepOnce(t, w, &r, 0)
		prompt := storedHashes(pass1.KVEvents)
		assert.Len(t, prompt, 1)
		chain.apply(pass1.KVEvents)
		pass2 := stepOnce(t, w, &r, pass1.End)
		prompt = append(prompt, nthStoredHashes(pass2.KVEvents, 0)...)
		chain.apply(pass2.KVEvents)
		pass3 := stepOnce(t, w, &r, pass2.End)
		prompt = append(prompt, nthStoredHashes(pass3.KVEvents, 0)...)
		chain.apply(pass3.KVEvents)
		assert.Len(t, prompt, byCompat(compat, 1, 2))
		_, done := r.completion(1)
		assert.True(t, done)
	})
}

// test_decode_growth_events_apply_cleanly: a 4-token prompt for 5 tokens.
// After its first pass and three more, Dynamo has stored 2 pages, the
// prompt's and the page of the first four outputs. By default mocker has
// stored 1: the fourth output's KV is computed a pass later.
func TestDynamo_DecodeGrowthEventsApplyCleanly(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(32, 4, 16), func(t *testing.T, compat bool, w *Worker) {
		var r record
		chain := newEventChain(t)
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: []uint32{7, 8, 9, 10}, MaxTokens: 5}, Release))
		pass := stepOnce(t, w, &r, 0)
		full := storedHashes(pass.KVEvents)
		chain.apply(pass.KVEvents)
		now := pass.End
		for range 3 {
			pass = stepOnce(t, w, &r, now)
			now = pass.End
			full = append(full, storedHashes(pass.KVEvents)...)
			chain.apply(pass.KVEvents)
		}
		assert.Len(t, full, byCompat(compat, 1, 2))
	})
}

// test_completed_output_block_uses_router_token_identity: a 2-token prompt
// for 2 tokens fills one page with its prompt and both outputs; Dynamo
// stores it when the request completes, hashed over the tokens the
// request generated. By default mocker stores nothing: the last token's
// KV is never computed, so the page is never full.
func TestDynamo_CompletedOutputBlockUsesRouterTokenIdentity(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(32, 4, 16), func(t *testing.T, compat bool, w *Worker) {
		var r record
		prompt := []uint32{101, 202}
		require.NoError(t, w.Submit(0, Request{ID: 0x5a17, Tokens: prompt, MaxTokens: 2}, Release))
		driveAll(t, w, &r, 0)
		require.Len(t, r.tokens, 2)
		seq := append(append([]uint32(nil), prompt...), r.tokens[0].Token, r.tokens[1].Token)
		_, want := kv.BlockHashes(seq, 4, nil, nil)
		got := storedHashes(r.kvEvents)
		if compat {
			assert.Equal(t, want, got)
		} else {
			assert.Empty(t, got)
		}
	})
}

// test_retract_frees_do_not_leave_stale_blocks: retracting a running
// request removes none of the pages it had cached; the router's overlap
// with the other request's prompt stays 1.
func TestDynamo_RetractFreesDoNotLeaveStaleBlocks(t *testing.T) {
	args := dynamoSGLangArgs(3, 4, 16, func(a *Args) { a.SGLang.ClipMaxNewTokens = 1 })
	eachSGLangCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		chain := newEventChain(t)
		p1, p2 := []uint32{1, 2, 3, 4}, []uint32{9, 8, 7, 6}
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: p1, MaxTokens: 8}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: p2, MaxTokens: 8}, Release))
		now := 0.0
		for i := 0; len(r.eventsOf(EventPreempted)) == 0; i++ {
			require.Less(t, i, 40, "nobody was retracted")
			out := stepOnce(t, w, &r, now)
			now = out.End
			chain.apply(out.KVEvents)
			if len(r.eventsOf(EventPreempted)) > 0 {
				assert.Zero(t, removedEventCount(out.KVEvents), "the retraction removes nothing")
			}
		}
		_, h1 := kv.BlockHashes(p1, 4, nil, nil)
		_, h2 := kv.BlockHashes(p2, 4, nil, nil)
		assert.Equal(t, 1, chain.overlap(h1))
		assert.Equal(t, 1, chain.overlap(h2))
	})
}

// test_completion_tail_free_does_not_remove_unpublished_blocks: a 4-token
// prompt for 3 tokens: its first pass stores the prompt's page in one
// event, and its completion removes nothing.
func TestDynamo_CompletionTailFreeDoesNotRemoveUnpublishedBlocks(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(32, 4, 16), func(t *testing.T, _ bool, w *Worker) {
		var r record
		chain := newEventChain(t)
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: []uint32{11, 12, 13, 14}, MaxTokens: 3}, Release))
		pass1 := stepOnce(t, w, &r, 0)
		prompt := nthStoredHashes(pass1.KVEvents, 0)
		full := storedHashes(pass1.KVEvents)
		chain.apply(pass1.KVEvents)
		pass2 := stepOnce(t, w, &r, pass1.End)
		full = append(full, storedHashes(pass2.KVEvents)...)
		chain.apply(pass2.KVEvents)
		pass3 := stepOnce(t, w, &r, pass2.End)
		assert.Zero(t, removedEventCount(pass3.KVEvents))
		full = append(full, storedHashes(pass3.KVEvents)...)
		chain.apply(pass3.KVEvents)
		assert.Len(t, prompt, 1)
		assert.GreaterOrEqual(t, len(full), len(prompt))
		_, done := r.completion(1)
		assert.True(t, done)
	})
}

// test_mixed_chunk_decode_retract_reprefill_complete_events_apply_cleanly:
// on a pool of 3 pages of 4 with chunks of 4, a 6-token prompt is
// prefilled in two chunks while a 4-token one runs; the pool runs dry, one
// is retracted and prefilled again, both complete, some page is evicted
// on the way, and the events apply cleanly.
func TestDynamo_MixedChunkDecodeRetractReprefillCompleteEventsApplyCleanly(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(3, 4, 4), func(t *testing.T, _ bool, w *Worker) {
		var r record
		chain := newEventChain(t)
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: []uint32{1, 2, 3, 4, 5, 6}, MaxTokens: 3}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: []uint32{9, 10, 11, 12}, MaxTokens: 3}, Release))
		now := 0.0
		for i := 0; w.Scheduler().HasWork(); i++ {
			require.Less(t, i, 100, "the worker did not drain")
			out := stepOnce(t, w, &r, now)
			now = out.End
			chain.apply(out.KVEvents)
		}
		require.Len(t, r.completions, 2)
		assert.Positive(t, removedEventCount(r.kvEvents), "some page was evicted")
	})
}

// test_live_pathological_load_no_router_event_errors: eight 1-token
// prompts for 4 tokens each on a pool of 4 pages of 4 all complete (32
// tokens), pages are evicted, and the events apply cleanly.
func TestDynamo_LivePathologicalLoadNoRouterEventErrors(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(4, 4, 4), func(t *testing.T, _ bool, w *Worker) {
		var r record
		chain := newEventChain(t)
		for i := range 8 {
			require.NoError(t, w.Submit(0, Request{ID: uint64(i), Tokens: []uint32{42}, MaxTokens: 4}, Release))
		}
		now := 0.0
		for i := 0; w.Scheduler().HasWork(); i++ {
			require.Less(t, i, 200, "the worker did not drain")
			out := stepOnce(t, w, &r, now)
			now = out.End
			chain.apply(out.KVEvents)
		}
		assert.Len(t, r.tokens, 32)
		assert.Positive(t, removedEventCount(r.kvEvents))
	})
}

// test_prefill_completion_emits_handoff_delay: on a prefill worker at
// 1 GB/s and 1 MB per token, an 8-token prompt's transfer takes 8 ms.
// Dynamo reports it on the completion; mocker when the transfer of the
// held KV starts.
func TestDynamo_PrefillCompletionEmitsHandoffDelay(t *testing.T) {
	args := dynamoSGLangArgs(64, 4, 16, func(a *Args) {
		a.WorkerType = WorkerPrefill
		a.SGLang.OptimisticPrefill = true
		bw, bpt := 1.0, 1_000_000
		a.KVTransferBandwidth, a.KVBytesPerToken = &bw, &bpt
	})
	eachSGLangCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 91, Tokens: repeatToken(1, 8), MaxTokens: 1}, Hold))
		out := stepOnce(t, w, &r, 0)
		require.Len(t, out.Completions, 1)
		delay, ok := w.StartTransfer(out.End, 91, 8)
		require.True(t, ok)
		assert.InDelta(t, 8.0, delay, 1e-9)
	})
}

// --- forward-pass figures ---

// test_fpm_chunked_prefill_reports_chunk_not_full_prompt: a 16-token prompt
// in chunks of 8 is prefilled over two passes of at most 8 tokens, 16 in
// all.
func TestDynamo_FPMChunkedPrefillReportsChunkNotFullPrompt(t *testing.T) {
	args := dynamoSGLangArgs(32, 4, 8, func(a *Args) { a.MaxNumSeqs = intp(4) })
	eachSGLangCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 16), MaxTokens: 2}, Release))
		p1 := stepOnce(t, w, &r, 0)
		p2 := stepOnce(t, w, &r, p1.End)
		assert.Positive(t, p1.PrefillTokens)
		assert.LessOrEqual(t, p1.PrefillTokens, 8)
		assert.LessOrEqual(t, p2.PrefillTokens, 8)
		assert.Equal(t, 16, p1.PrefillTokens+p2.PrefillTokens)
	})
}

// dynamoSGLangFPMArgs is Dynamo's fpm_args: 16 pages of 4, a chunk budget
// of 16, four running slots.
func dynamoSGLangFPMArgs() Args {
	return dynamoSGLangArgs(16, 4, 16, func(a *Args) { a.MaxNumSeqs = intp(4) })
}

// test_fpm_single_prefill_request: on 16 pages of 4 with a 16-token chunk,
// an 8-token prompt for 1 token is prefilled (8 tokens) in a pass of
// positive length that also samples its first token (Dynamo's decode step
// of the same pass, with the request in it), leaving nothing queued,
// prefill or decode. Not mirrored: the prefill-request count.
func TestDynamo_SGLangFPMSinglePrefillRequest(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangFPMArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 8), MaxTokens: 1}, Release))
		out := stepOnce(t, w, &r, 0)
		assert.Equal(t, 8, out.PrefillTokens)
		assert.Equal(t, []uint64{1}, tokenIDs(out), "its first token is sampled in the same pass")
		assert.Zero(t, w.Metrics().Waiting, "nothing queued")
		assert.Positive(t, out.Duration())
	})
}

// test_fpm_prefill_and_decode_mixed_batch: a 4-token prompt for 3 tokens
// is prefilled; a second arrives, and Dynamo's next pass prefills it and
// then runs one decode step over both (2 decode requests). mocker's, by
// default and under dynamo_compat, is an extend pass, as SGLang's: it
// prefills the second and samples its first token while the first waits,
// so only the second gets a token. Not mirrored: the prefill-request
// counts and the decode KV context.
func TestDynamo_SGLangFPMPrefillAndDecodeMixedBatch(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangFPMArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 3}, Release))
		p1 := stepOnce(t, w, &r, 0)
		require.NoError(t, w.Submit(p1.End, Request{ID: 2, Tokens: seqTokens(100, 4), MaxTokens: 3}, Release))
		p2 := stepOnce(t, w, &r, p1.End)
		assert.Equal(t, []uint64{2}, tokenIDs(p2), "the running request waits out the extend pass (Dynamo: both decode)")
	})
}

// test_fpm_queued_requests: two 8-token prompts on 4 pages of 4 with an
// 8-token chunk budget: one is scheduled, the other queued.
func TestDynamo_FPMQueuedRequests(t *testing.T) {
	args := dynamoSGLangArgs(4, 4, 8, func(a *Args) { a.MaxNumSeqs = intp(2) })
	eachSGLangCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 8), MaxTokens: 1}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 8), MaxTokens: 1}, Release))
		out := stepOnce(t, w, &r, 0)
		assert.GreaterOrEqual(t, len(out.Tokens), 1, "at least one scheduled")
		assert.GreaterOrEqual(t, w.Metrics().Waiting, 1, "at least one queued")
	})
}

// test_mocker_metrics_reports_prefix_cache_reuse: an 8-token prompt hits
// nothing; the same prompt submitted while the first runs hits its cached
// pages, no more than its length.
func TestDynamo_MockerMetricsReportsPrefixCacheReuse(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangFPMArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		p1 := stepOnce(t, w, &r, 0)
		require.NoError(t, w.Submit(p1.End, Request{ID: 2, Tokens: seqTokens(0, 8), MaxTokens: 1}, Release))
		driveAll(t, w, &r, p1.End)
		c1, ok := r.completion(1)
		require.True(t, ok)
		c2, ok := r.completion(2)
		require.True(t, ok)
		assert.Zero(t, c1.CachedTokens)
		assert.Positive(t, c2.CachedTokens)
		assert.LessOrEqual(t, c2.CachedTokens, 8)
	})
}

// --- source holds ---

// dynamoSGLangSourceArgs is Dynamo's source_holds args: an SGLang prefill
// worker of 16 pages of 4, one running request, chunks of 16. Dynamo's
// SubmitHandoffPrefill runs at once, as mocker's optimistic prefill does.
func dynamoSGLangSourceArgs() Args {
	return dynamoSGLangArgs(16, 4, 16, func(a *Args) {
		a.WorkerType = WorkerPrefill
		a.MaxNumSeqs = intp(1)
		a.SGLang.OptimisticPrefill = true
	})
}

// terminal_completion_holds_source_without_running_cleanup: an 8-token
// prompt for 2 tokens on a prefill worker. Dynamo's first pass does not
// complete it; the second does and holds its KV (3 pages: the prompt's
// and the first token's), with nothing left running. Releasing the hold
// frees pages (the first token's partial page; the prompt's stay cached);
// a second release changes nothing. By default mocker's prefill worker
// stops at the first token, so the first pass completes and holds the
// prompt's 2 pages, which all stay cached when released: no page is
// freed.
func TestDynamo_SGLangTerminalCompletionHoldsSourceWithoutRunningCleanup(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangSourceArgs(), func(t *testing.T, compat bool, w *Worker) {
		var r record
		const id = 301
		require.NoError(t, w.Submit(0, Request{ID: id, Tokens: seqTokens(0, 8), MaxTokens: 2}, Hold))
		first := stepOnce(t, w, &r, 0)
		_, done := r.completion(id)
		assert.Equal(t, !compat, done, "the first pass completes only by default")
		end := first.End
		if compat {
			end = stepOnce(t, w, &r, first.End).End
			_, done = r.completion(id)
			assert.True(t, done, "the second pass completes")
		}
		assert.Len(t, r.eventsFor(EventHoldStarted, id), 1)
		m := w.Metrics()
		assert.Zero(t, m.Running)
		assert.Equal(t, byCompat(compat, 2, 3), m.HeldBlocks)
		held := occupiedPages(w)

		require.True(t, w.ReleaseHeld(end, id, Transferred))
		released := occupiedPages(w)
		assert.Zero(t, w.Metrics().ActiveBlocks)
		if compat {
			assert.Less(t, released, held)
		} else {
			assert.Equal(t, held, released)
		}
		assert.False(t, w.ReleaseHeld(end, id, Transferred))
		assert.Equal(t, released, occupiedPages(w))
	})
}

// cancel_and_early_release_cleanup_exactly_once: cancelling a held source
// frees pages once; a second cancellation changes nothing. A source
// released before it ran (Dynamo's ReleaseSource on a pending handoff) is
// cancelled here: it never runs, and a request under the same id runs to
// completion afterwards.
func TestDynamo_SGLangCancelAndEarlyReleaseCleanupExactlyOnce(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangSourceArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		const first, second = 302, 303
		require.NoError(t, w.Submit(0, Request{ID: first, Tokens: seqTokens(0, 8), MaxTokens: 2}, Hold))
		now := drive(t, w, &r, 0)
		require.Len(t, r.eventsFor(EventHoldStarted, first), 1)
		held := occupiedPages(w)
		require.True(t, w.Cancel(now, first))
		cancelled := occupiedPages(w)
		assert.Less(t, w.Metrics().ActiveBlocks, held)
		assert.False(t, w.Cancel(now, first))
		assert.Equal(t, cancelled, occupiedPages(w))

		require.NoError(t, w.Submit(now, Request{ID: second, Tokens: seqTokens(0, 8), MaxTokens: 2}, Hold))
		require.True(t, w.Cancel(now, second), "released before it ran")
		passes := w.Passes()
		drive(t, w, &r, now)
		assert.Equal(t, passes, w.Passes(), "nothing runs")
		require.NoError(t, w.Submit(now, Request{ID: second, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		driveAll(t, w, &r, now)
		_, done := r.completion(second)
		assert.True(t, done)
		assert.Zero(t, w.Metrics().HeldRequests)
	})
}

// ordinary_completion_keeps_default_cleanup: a request that does not hold
// completes on the prefill worker (after 2 passes in Dynamo and under
// dynamo_compat, 1 by default) and leaves its full pages cached: 8 tokens
// occupied.
func TestDynamo_SGLangOrdinaryCompletionKeepsDefaultCleanup(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangSourceArgs(), func(t *testing.T, compat bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 306, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		first := stepOnce(t, w, &r, 0)
		if compat {
			assert.Empty(t, r.completions)
			stepOnce(t, w, &r, first.End)
		}
		require.Len(t, r.completions, 1)
		assert.Equal(t, 8, occupiedPages(w)*4)
	})
}

// active_request_id_is_rejected_before_source_hold_registration: a second
// submission under a live request's id is refused, as a plain request and
// as a held one, and the worker still has one request.
func TestDynamo_SGLangActiveRequestIDIsRejectedBeforeSourceHoldRegistration(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangSourceArgs(), func(t *testing.T, _ bool, w *Worker) {
		require.NoError(t, w.Submit(0, Request{ID: 307, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		assert.Error(t, w.Submit(0, Request{ID: 307, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		assert.Error(t, w.Submit(0, Request{ID: 307, Tokens: seqTokens(0, 8), MaxTokens: 2}, Hold))
		assert.Equal(t, 1, w.Metrics().Waiting)
		assert.Zero(t, w.Metrics().HeldRequests)
	})
}

// --- destination lifecycle ---

// dynamoSGLangDestArgs is Dynamo's destination_lifecycle args on a decode
// worker: pages of 4, one running request, chunks of chunk.
func dynamoSGLangDestArgs(blocks, seqs, chunk int) Args {
	return dynamoSGLangArgs(blocks, 4, chunk, func(a *Args) {
		a.WorkerType = WorkerDecode
		a.MaxNumSeqs = intp(seqs)
	})
}

// destination_lifecycle_is_counted_once_as_queued_decode, on 6 pages: a
// 4-token destination is reserved, a 24-token one (6 pages, 5 free) stays
// pending and is cancelled, a blocker takes the running slot, the
// reserved one is activated and runs after it. Dynamo's waiting_requests
// reads 1, 2, 1, 1 and 0 at the end; mocker's Waiting leaves reserved
// destinations out by default (0, 1, 0, 1, 0) and gives Dynamo's figure
// under dynamo_compat; DynamoWaiting is Dynamo's in both. mocker's
// destinations reserve in a pass, so each reservation is driven first. The
// held destination asks for 2 tokens where Dynamo's asks for 1: mocker
// counts the prefill side's token in MaxTokens.
func TestDynamo_SGLangDestinationLifecycleIsCountedOnceAsQueuedDecode(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangDestArgs(6, 1, 32), func(t *testing.T, compat bool, w *Worker) {
		var r record
		waiting := func(mocker, dynamo int, msg string) {
			t.Helper()
			m := w.Metrics()
			assert.Equal(t, byCompat(compat, mocker, dynamo), m.Waiting, "Waiting: %s", msg)
			assert.Equal(t, dynamo, m.DynamoWaiting, "DynamoWaiting: %s", msg)
		}
		const held, pending, blocker = 33002, 33004, 33005
		require.NoError(t, w.Reserve(0, Request{ID: held, Tokens: repeatToken(1, 4), MaxTokens: 2}))
		now := drive(t, w, &r, 0)
		require.Len(t, r.eventsFor(EventDecodeReserved, held), 1)
		waiting(0, 1, "after the reservation")

		require.NoError(t, w.Reserve(now, Request{ID: pending, Tokens: repeatToken(2, 24), MaxTokens: 1}))
		now = drive(t, w, &r, now)
		assert.Empty(t, r.eventsFor(EventDecodeReserved, pending))
		waiting(1, 2, "with a pending destination")

		require.True(t, w.CancelDestination(now, pending))
		waiting(0, 1, "after the pending one is cancelled")

		require.NoError(t, w.Submit(now, Request{ID: blocker, Tokens: repeatToken(3, 4), MaxTokens: 2}, Release))
		out := stepOnce(t, w, &r, now)
		require.Equal(t, 1, w.Metrics().Running)
		require.True(t, w.Activate(out.End, held))
		waiting(1, 1, "the activated request waits for the slot")

		driveAll(t, w, &r, out.End)
		_, ok := r.completion(held)
		require.True(t, ok)
		waiting(0, 0, "after completion")
		assert.Zero(t, w.Metrics().ActiveBlocks)
	})
}

// destination_transfer_footprint_excludes_decode_headroom: a 10-token
// prompt reserves a transfer footprint of 12 tokens whatever its output,
// on 16 pages of 4. By default mocker refuses the one asking for 128
// tokens (never_fits: with its output it needs 35 pages, and it could
// never complete); Dynamo, and mocker under dynamo_compat, refuse a
// destination only when its prompt alone exceeds the pool.
func TestDynamo_SGLangDestinationTransferFootprintExcludesDecodeHeadroom(t *testing.T) {
	for _, maxOut := range []int{1, 128} {
		eachSGLangCompat(t, dynamoSGLangDestArgs(16, 1, 16), func(t *testing.T, compat bool, w *Worker) {
			var r record
			require.NoError(t, w.Reserve(0, Request{ID: 1, Tokens: seqTokens(0, 10), MaxTokens: maxOut}))
			drive(t, w, &r, 0)
			if !compat && maxOut == 128 {
				require.Len(t, r.rejections, 1)
				assert.Equal(t, RejectNeverFits, r.rejections[0].Code)
				return
			}
			res := r.eventsFor(EventDecodeReserved, 1)
			require.Len(t, res, 1, "reserved at once")
			assert.Equal(t, 12, res[0].MissingTokens, "max output %d", maxOut)
		})
	}
}

// destination_cancel_reaches_activated_request_exactly_once: a reserved
// and activated destination runs; cancelling it then ends it and leaves
// the worker empty, and a second cancellation does nothing. Dynamo
// cancels through CancelDestination at every stage; mocker's
// CancelDestination covers the stages before activation and Cancel the
// rest.
func TestDynamo_SGLangDestinationCancelReachesActivatedRequestExactlyOnce(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangDestArgs(16, 1, 16), func(t *testing.T, _ bool, w *Worker) {
		var r record
		const id = 20101
		require.NoError(t, w.Reserve(0, Request{ID: id, Tokens: seqTokens(0, 8), MaxTokens: 4}))
		now := drive(t, w, &r, 0)
		require.Len(t, r.eventsFor(EventDecodeReserved, id), 1)
		require.True(t, w.Activate(now, id))
		stepOnce(t, w, &r, now)
		assert.Equal(t, 1, w.Metrics().Running)
		now = r.outs[len(r.outs)-1].End

		assert.False(t, w.CancelDestination(now, id), "activated: no longer a destination")
		require.True(t, w.Cancel(now, id))
		assert.False(t, w.Scheduler().HasWork())
		assert.Zero(t, w.Metrics().ActiveBlocks)
		assert.False(t, w.Cancel(now, id))
	})
}

// handoff_prefill_to_reserved_decode_owns_kv_until_prebuilt_admission:
// on a decode worker of 16 pages of 4 with one running slot, [0..3] is
// cached by a finished request and a blocker ([100..103] for 3 tokens)
// runs. A prefill worker holds the source of [0..7]. The destination for
// it is reserved while the blocker keeps the slot: it takes KV (the pages
// in use grow), announces nothing, and nothing else runs. Activated, it
// keeps its blocks and waits; the source is released and its worker is
// left empty. The blocker's last pass does not admit it; the next pass
// does, and the one after completes it, leaving the decode worker empty,
// with no reservation and no active block.
//
// mocker reserves a destination in a pass, so the reservation is driven
// first; that pass is the blocker's second, so there is no pass between
// the activation and the blocker's last (Dynamo's "blocked" pass: its
// three checks are not mirrored). The destination asks for 3 tokens where
// Dynamo's asks for 2: mocker counts the prefill side's token in
// MaxTokens. Differs in both: Dynamo's destination announces the
// transferred pages when it is activated; mocker's decode workers publish
// no KV events. Not mirrored either: the request's page ids at activation
// and admission, and the admission's reused input tokens, which mocker
// does not record.
func TestDynamo_SGLangHandoffPrefillToReservedDecodeOwnsKVUntilPrebuiltAdmission(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangDestArgs(16, 1, 16), func(t *testing.T, compat bool, w *Worker) {
		var r record
		const logical, first, blocker = 20001, 20003, 20004
		require.NoError(t, w.Submit(0, Request{ID: first, Tokens: seqTokens(0, 4), MaxTokens: 1}, Release))
		now := drive(t, w, &r, 0)
		assert.False(t, w.Scheduler().HasWork(), "the first request is done")

		require.NoError(t, w.Submit(now, Request{ID: blocker, Tokens: seqTokens(100, 4), MaxTokens: 3}, Release))
		now = stepOnce(t, w, &r, now).End
		assert.Equal(t, 1, w.Metrics().Running)

		// The source side, on its own prefill worker.
		srcArgs := dynamoSGLangSourceArgs()
		srcArgs.DynamoCompat = compat
		src := newWorker(t, srcArgs)
		var sr record
		assert.NoError(t, src.Submit(0, Request{ID: logical, Tokens: seqTokens(0, 8), MaxTokens: 3}, Hold))
		srcNow := drive(t, src, &sr, 0)
		m := src.Metrics()
		assert.Zero(t, m.Running+m.Waiting, "the source ran to completion")
		assert.Equal(t, 1, m.HeldRequests, "its KV is held")
		assert.Positive(t, m.HeldBlocks, "not drained")

		before := occupiedPages(w)
		require.NoError(t, w.Reserve(now, Request{ID: logical, Tokens: seqTokens(0, 8), MaxTokens: 3}))
		out := stepOnce(t, w, &r, now)
		now = out.End
		res := r.eventsFor(EventDecodeReserved, logical)
		require.Len(t, res, 1, "reserved while the blocker keeps the slot")
		m = w.Metrics()
		assert.Equal(t, 1, m.ReservedRequests)
		assert.Positive(t, m.ReservedBlocks, "not drained")
		assert.Equal(t, 1, m.Running)
		assert.Greater(t, occupiedPages(w), before)
		assert.Zero(t, storedEventCount(out.KVEvents), "nothing announced at the reservation")
		assert.Positive(t, res[0].Blocks)

		active := m.ActiveBlocks
		assert.True(t, w.Activate(now, logical))
		m = w.Metrics()
		assert.Equal(t, 1, m.Running)
		assert.GreaterOrEqual(t, m.ActiveBlocks, active, "the activated request keeps its blocks")

		assert.True(t, src.ReleaseHeld(srcNow, logical, Transferred))
		m = src.Metrics()
		assert.Zero(t, m.Running+m.Waiting)
		assert.Zero(t, m.HeldRequests+m.ActiveBlocks, "drained")

		// The activation's events, if any, leave with the next pass.
		out = stepOnce(t, w, &r, now)
		now = out.End
		assert.Empty(t, storedHashes(out.KVEvents), "nothing announced at the activation (Dynamo: the transferred pages)")
		assert.NotContains(t, tokenIDs(out), uint64(logical), "not admitted in the blocker's last pass")
		_, done := r.completion(blocker)
		assert.True(t, done)
		assert.Equal(t, 1, w.Metrics().Waiting, "still waiting for the slot")

		out = stepOnce(t, w, &r, now)
		now = out.End
		assert.Equal(t, []uint64{logical}, tokenIDs(out), "admitted")
		assert.Zero(t, storedEventCount(out.KVEvents), "nothing announced again")

		stepOnce(t, w, &r, now)
		_, done = r.completion(logical)
		assert.True(t, done, "completed the pass after its admission")
		assert.False(t, w.Scheduler().HasWork())
		m = w.Metrics()
		assert.Zero(t, m.ActiveBlocks, "drained")
		assert.Zero(t, m.ReservedRequests)
		assert.Zero(t, m.HeldBlocks+m.ReservedBlocks)
	})
}

// kv_blocked_live_scheduler_waits_and_cancel_wakes_it: on a decode worker
// of 2 pages, an 8-token reservation takes both; a 4-token request queued
// behind it cannot run, and the worker parks without running empty passes
// (Dynamo's live scheduler publishes no repeated zero-work pass).
// Cancelling the reservation lets the request run.
func TestDynamo_SGLangKVBlockedLiveSchedulerWaitsAndCancelWakesIt(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangDestArgs(2, 2, 16), func(t *testing.T, compat bool, w *Worker) {
		var r record
		require.NoError(t, w.Reserve(0, Request{ID: 30002, Tokens: repeatToken(1, 8), MaxTokens: 1}))
		now := drive(t, w, &r, 0)
		require.Len(t, r.eventsFor(EventDecodeReserved, 30002), 1)

		require.NoError(t, w.Submit(now, Request{ID: 30003, Tokens: repeatToken(2, 4), MaxTokens: 1}, Release))
		now = drive(t, w, &r, now)
		assert.Equal(t, byCompat(compat, 1, 2), w.Metrics().Waiting, "the request queues (and, in Dynamo's count, the reservation)")
		passes := w.Passes()
		for _, at := range []float64{now + 1, now + 10, now + 100} {
			assert.Nil(t, w.Step(at))
		}
		assert.Equal(t, passes, w.Passes(), "no zero-work passes while blocked")

		require.True(t, w.CancelDestination(now+100, 30002))
		driveAll(t, w, &r, now+100)
		_, done := r.completion(30003)
		assert.True(t, done, "the cancellation woke the blocked request")
	})
}

// test_sglang_scheduler_token_generation_patterns: 200 requests of 1000
// prompt tokens (half of them shared, or none) for 100 tokens each, fifo
// or lpm, pages of 1 or 4, on a pool of 500 blocks of 64 tokens, all
// complete: 20000 tokens; the pool was used and its usage stayed within
// it. mocker's pages are its blocks, so the pool is 32000 tokens in pages
// of the given size.
func TestDynamo_SGLangSchedulerTokenGenerationPatterns(t *testing.T) {
	for _, shared := range []bool{false, true} {
		for _, policy := range []string{SGLangPolicyFIFO, SGLangPolicyLPM} {
			for _, page := range []int{1, 4} {
				args := dynamoSGLangArgs(500*64/page, page, 8192, func(a *Args) { a.SGLang.SchedulePolicy = policy })
				for _, compat := range []bool{false, true} {
					a := args
					sg := *a.SGLang
					a.SGLang, a.DynamoCompat = &sg, compat
					w := newWorker(t, a)
					var r record
					for i := range 200 {
						var tokens []uint32
						if shared {
							tokens = repeatToken(1, 500)
						}
						for j := len(tokens); j < 1000; j++ {
							tokens = append(tokens, uint32(i*1000+j+1000))
						}
						require.NoError(t, w.Submit(0, Request{ID: uint64(i), Tokens: tokens, MaxTokens: 100}, Release))
					}
					peak, now := 0, 0.0
					for i := 0; w.Scheduler().HasWork(); i++ {
						require.Less(t, i, 100000)
						out := w.Step(now)
						if out == nil {
							at, ok := w.workWake()
							require.True(t, ok)
							now = at
							continue
						}
						r.add(out)
						now = max(now, out.End)
						peak = max(peak, out.Metrics.ActiveBlocks)
					}
					name := fmt.Sprintf("shared %v, %s, page %d, dynamo_compat %v", shared, policy, page, compat)
					assert.Len(t, r.tokens, 200*100, name)
					assert.Positive(t, peak, name)
					assert.LessOrEqual(t, peak, w.Metrics().TotalBlocks, name)
				}
			}
		}
	}
}

// destination_transfer_footprint_uses_missing_physical_pages: a 10-token
// destination on pages of 4 moves 12 tokens cold, 8 when its first page
// is cached, and none when an 8-token prompt is cached whole.
func TestDynamo_DestinationTransferFootprintUsesMissingPhysicalPages(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangDestArgs(16, 4, 16), func(t *testing.T, _ bool, w *Worker) {
		var r record
		reserve := func(id uint64, tokens []uint32, now float64) (int, float64) {
			t.Helper()
			require.NoError(t, w.Reserve(now, Request{ID: id, Tokens: tokens, MaxTokens: 2}))
			now = drive(t, w, &r, now)
			res := r.eventsFor(EventDecodeReserved, id)
			require.Len(t, res, 1)
			require.True(t, w.CancelDestination(now, id))
			return res[0].MissingTokens, now
		}
		prompt := seqTokens(0, 10)
		cold, now := reserve(1, prompt, 0)
		assert.Equal(t, 12, cold)

		require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: prompt[:4], MaxTokens: 1}, Release))
		now = driveAll(t, w, &r, now)
		partial, now := reserve(3, prompt, now)
		assert.Equal(t, 8, partial)

		aligned := seqTokens(20, 8)
		require.NoError(t, w.Submit(now, Request{ID: 4, Tokens: aligned, MaxTokens: 1}, Release))
		now = driveAll(t, w, &r, now)
		full, _ := reserve(5, aligned, now)
		assert.Zero(t, full)
	})
}

// TestFidelity_SGLangChunkBudgetChargesPages: a 7-token prompt and a
// 1-token one under a chunk budget of 8 on pages of 4. Dynamo charges the
// first a whole page of budget for its partial page, 8 tokens, leaving
// none for the second, which waits for the next pass; mocker by default
// charges the 7 tokens computed, as SGLang does, and admits both.
func TestFidelity_SGLangChunkBudgetChargesPages(t *testing.T) {
	eachSGLangCompat(t, dynamoSGLangArgs(64, 4, 8), func(t *testing.T, compat bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: repeatToken(1, 7), MaxTokens: 2}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: repeatToken(2, 1), MaxTokens: 2}, Release))
		out := stepOnce(t, w, &r, 0)
		if compat {
			assert.Equal(t, []uint64{1}, tokenIDs(out))
			assert.Equal(t, 1, w.Metrics().Waiting)
		} else {
			assert.Equal(t, []uint64{1, 2}, tokenIDs(out))
			assert.Zero(t, w.Metrics().Waiting)
		}
	})
}
