package engine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// mirrorPool drives a blockPool the way Dynamo's KvManager tests do: a
// block is named by an id that is also its hash.
type mirrorPool struct {
	t       *testing.T
	p       *blockPool
	private map[uint64]int32 // blocks never given a hash (Dynamo destroys them)
}

// use is MoveBlock::Use: an indexed id is referenced again (revived if
// inactive), a new one is allocated and indexed; private ids stay
// unindexed.
func (m *mirrorPool) use(private bool, ids ...uint64) {
	for _, id := range ids {
		if s, ok := m.p.lookup(kv.SeqHash(id)); ok {
			m.p.acquire(s)
			continue
		}
		s, ok := m.p.alloc()
		require.True(m.t, ok, "block %d", id)
		if private {
			m.private[id] = s
			continue
		}
		m.p.store(s, kv.SeqHash(id), kv.LocalHash(id))
	}
}

// deref is MoveBlock::Deref, in the order given.
func (m *mirrorPool) deref(ids ...uint64) {
	for _, id := range ids {
		s, ok := m.p.lookup(kv.SeqHash(id))
		require.True(m.t, ok, "block %d", id)
		m.p.release(s)
	}
}

// destroy is MoveBlock::Destroy of a block that never got a hash: it goes
// straight back to the free list.
func (m *mirrorPool) destroy(ids ...uint64) {
	for _, id := range ids {
		m.p.release(m.private[id])
		delete(m.private, id)
	}
}

func (m *mirrorPool) active() map[uint64]int {
	out := map[uint64]int{}
	for id, s := range m.private {
		out[id] = int(m.p.blocks[s].ref)
	}
	for _, b := range m.p.blocks {
		if b.indexed() && b.ref > 0 {
			out[uint64(b.hash)] = int(b.ref)
		}
	}
	return out
}

func (m *mirrorPool) inactive() []uint64 {
	var out []uint64
	for _, s := range m.p.lruOrder() {
		out = append(out, uint64(m.p.blocks[s].hash))
	}
	return out
}

// TestDynamo_BlockLifecycleStringent replays Dynamo's KvManager test
// test_block_lifecycle_stringent (lib/mocker/src/kv_manager) on mocker's
// pool: capacity 10, ids as hashes; blocks 4 and 6, which it destroys,
// are unhashed here. Inactive lists are in LRU order, oldest first.
func TestDynamo_BlockLifecycleStringent(t *testing.T) {
	m := &mirrorPool{t: t, p: newBlockPool(10, false), private: map[uint64]int32{}}

	m.use(false, 0, 1, 2, 3)
	m.use(true, 4)
	m.use(false, 0, 1, 5)
	m.use(true, 6)
	assert.Equal(t, map[uint64]int{0: 2, 1: 2, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1}, m.active())

	m.destroy(4)
	m.deref(0, 1, 2, 3)
	assert.Equal(t, []uint64{2, 3}, m.inactive(), "size 2, holding 3 and 2")
	assert.Equal(t, map[uint64]int{0: 1, 1: 1, 5: 1, 6: 1}, m.active())

	m.destroy(6)
	m.deref(0, 1, 5)
	assert.Equal(t, []uint64{2, 3, 0, 1, 5}, m.inactive(), "size 5: 0, 1, 2, 3, 5")
	assert.Empty(t, m.active())

	m.use(false, 0, 1, 2, 7, 8, 9)
	assert.Equal(t, []uint64{3, 5}, m.inactive(), "size 2: 3 and 5")
	assert.Equal(t, map[uint64]int{0: 1, 1: 1, 2: 1, 7: 1, 8: 1, 9: 1}, m.active())

	// probe_new_blocks([0..4]) = 1: only 4 is unknown.
	fresh := 0
	for id := range uint64(5) {
		if _, ok := m.p.lookup(kv.SeqHash(id)); !ok {
			fresh++
		}
	}
	assert.Equal(t, 1, fresh)

	// 10 and 11 take the two free blocks, 12 evicts the LRU inactive (3).
	m.use(false, 10, 11, 12)
	assert.Equal(t, []uint64{5}, m.inactive(), "size 1: only 5")
	m.use(false, 13)
	assert.Empty(t, m.inactive(), "13 evicts 5")
	require.NoError(t, m.p.audit())
}

// TestDynamo_FailureOnMaxCapacity replays test_failure_on_max_capacity: 10
// blocks in use, an 11th cannot be allocated (and nothing panics).
func TestDynamo_FailureOnMaxCapacity(t *testing.T) {
	m := &mirrorPool{t: t, p: newBlockPool(10, false), private: map[uint64]int32{}}
	m.use(false, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	assert.Equal(t, 10, m.p.active)
	_, ok := m.p.alloc()
	assert.False(t, ok)
	require.NoError(t, m.p.audit())
}

// Dynamo's vLLM destination tests (lib/mocker/src/scheduler/vllm/tests.rs,
// mod destination_lifecycle), on a decode worker built as theirs is:
// block_size 4, 12 blocks, max_num_batched_tokens 16, max_num_seqs 1,
// prefix caching on.
func dynamoDecodeArgs() Args {
	return decodeArgs(12, func(a *Args) {
		a.MaxNumBatchedTokens = intp(16)
		a.MaxNumSeqs = intp(1)
	})
}

// destination_transfer_footprint_excludes_decode_headroom: a 10-token
// prompt reserves a transfer footprint of 12 tokens (3 blocks of 4),
// whatever its max output (1 or 128), under either setting.
func TestDynamo_DestinationTransferFootprintExcludesDecodeHeadroom(t *testing.T) {
	for _, maxOut := range []int{1, 128} {
		t.Run(fmt.Sprintf("max_tokens %d", maxOut), func(t *testing.T) {
			eachVLLMCompat(t, dynamoDecodeArgs(), func(t *testing.T, _ bool, w *Worker) {
				var r record
				tokens := make([]uint32, 10)
				for i := range tokens {
					tokens[i] = uint32(i)
				}
				require.NoError(t, w.Reserve(0, Request{ID: 1, Tokens: tokens, MaxTokens: maxOut}))
				drive(t, w, &r, 0)
				res := r.eventsFor(EventDecodeReserved, 1)
				require.Len(t, res, 1, "reserved at once")
				assert.Equal(t, 12, res[0].MissingTokens)
			})
		})
	}
}

// handoff_prefill_to_reserved_decode_owns_kv_until_normal_admission, the
// form counted: a prefill worker runs tokens 0..7 for 2 tokens to a hold
// (nothing left to run, its KV held). The destination for it on an idle
// decode worker is reserved at once, its blocks the only active ones;
// activation takes no more; the first pass runs it, and the worker ends
// empty with no active block. Releasing the source drains its worker. The
// same under mocker's default and under dynamo_compat.
func TestDynamo_VLLMHandoffPrefillToReservedDecodeOwnsKVUntilNormalAdmission(t *testing.T) {
	eachVLLMCompat(t, dynamoDecodeArgs(), func(t *testing.T, compat bool, w *Worker) {
		const id = 10001
		tokens := seqTokens(0, 8)
		srcArgs := prefillArgs(12, func(a *Args) {
			a.MaxNumBatchedTokens = intp(16)
			a.MaxNumSeqs = intp(1)
			a.DynamoCompat = compat
		})
		src := newWorker(t, srcArgs)
		var sr record
		assert.NoError(t, src.Submit(0, Request{ID: id, Tokens: tokens, MaxTokens: 2}, Hold))
		srcNow := drive(t, src, &sr, 0)
		m := src.Metrics()
		assert.Zero(t, m.Running+m.Waiting, "the source ran to completion")
		assert.Equal(t, 1, m.HeldRequests, "its KV is held")
		assert.Positive(t, m.HeldBlocks, "not drained")

		var r record
		require.NoError(t, w.Reserve(0, Request{ID: id, Tokens: tokens, MaxTokens: 2}))
		now := drive(t, w, &r, 0)
		res := r.eventsFor(EventDecodeReserved, id)
		assert.Len(t, res, 1, "reserved at once")
		require.NotEmpty(t, res)
		reserved := res[0].Blocks
		assert.Positive(t, reserved)
		assert.Equal(t, reserved, w.Metrics().ActiveBlocks)

		assert.True(t, w.Activate(now, id))
		assert.Equal(t, reserved, w.Metrics().ActiveBlocks, "activation takes no more")
		out := stepOnce(t, w, &r, now)
		assert.Contains(t, tokenIDs(out), uint64(id), "admitted in the first pass")

		driveAll(t, w, &r, out.End)
		assert.False(t, w.Scheduler().HasWork())
		assert.Zero(t, w.Metrics().ActiveBlocks)
		assert.True(t, src.ReleaseHeld(srcNow, id, Transferred))
		m = src.Metrics()
		assert.Zero(t, m.HeldRequests+m.ActiveBlocks, "drained")
	})
}

// handoff_prefill_to_reserved_decode_owns_kv_until_normal_admission, in
// an earlier form than the one counted: a
// destination for tokens 0..7 arrives while a blocker holds the one
// running slot: it is not reserved (no event, no blocks) until the blocker
// completes; then it reserves with 4 transferable tokens (block 0..3 is
// cached from an earlier request). A second blocker is admitted while the
// reservation is held; the activated request waits, keeping its blocks,
// until that blocker completes, then runs and completes, leaving no active
// block. The same under mocker's default and under dynamo_compat.
func TestDynamo_HandoffPrefillToReservedDecodeOwnsKVUntilNormalAdmission(t *testing.T) {
	eachVLLMCompat(t, dynamoDecodeArgs(), handoffOwnsKVUntilNormalAdmission)
}

func handoffOwnsKVUntilNormalAdmission(t *testing.T, _ bool, w *Worker) {
	var r record
	seq := func(from, n uint32) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = from + uint32(i)
		}
		return out
	}
	require.NoError(t, w.Submit(0, Request{ID: 10003, Tokens: seq(0, 4), MaxTokens: 1}, Release))
	now := drive(t, w, &r, 0)

	require.NoError(t, w.Submit(now, Request{ID: 10004, Tokens: seq(100, 4), MaxTokens: 3}, Release))
	out := w.Step(now)
	require.NotNil(t, out)
	r.add(out)
	require.Equal(t, 1, w.Metrics().Running)

	before := w.Metrics().ActiveBlocks
	require.NoError(t, w.Reserve(now, Request{ID: 10001, Tokens: seq(0, 8), MaxTokens: 2}))
	assert.Empty(t, r.eventsFor(EventDecodeReserved, 10001))
	assert.Equal(t, before, w.Metrics().ActiveBlocks, "nothing reserved while the slot is taken")

	now = drive(t, w, &r, out.End)
	blocker, ok := r.completion(10004)
	require.True(t, ok)
	res := r.eventsFor(EventDecodeReserved, 10001)
	require.Len(t, res, 1)
	assert.Equal(t, blocker.At, res[0].At, "reserved when the blocker completed")
	assert.Equal(t, 4, res[0].MissingTokens, "block 0..3 was cached")
	reservedBlocks := res[0].Blocks

	require.NoError(t, w.Submit(now, Request{ID: 10005, Tokens: seq(200, 4), MaxTokens: 3}, Release))
	out = w.Step(now)
	require.NotNil(t, out)
	r.add(out)
	require.Equal(t, 1, w.Metrics().Running, "admitted while the reservation is held")
	occupied := w.Metrics().ActiveBlocks
	require.True(t, w.Activate(out.Start, 10001))
	m := w.Metrics()
	assert.Equal(t, occupied, m.ActiveBlocks)
	assert.Equal(t, 1, m.Waiting, "the activated request waits for the slot")
	assert.Equal(t, 1, m.Running)
	assert.Equal(t, 2, reservedBlocks)

	driveAll(t, w, &r, out.End)
	c2, ok := r.completion(10005)
	require.True(t, ok)
	c, ok := r.completion(10001)
	require.True(t, ok)
	assert.Greater(t, c.At, c2.At)
	assert.Equal(t, 0, w.Metrics().ActiveBlocks)
}
