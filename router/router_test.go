package router_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bs is the block size of the scenario tests: each letter of a prompt is one
// block of bs distinct tokens.
const bs = 4

func tokens(prompt string) []uint32 {
	var out []uint32
	for _, c := range prompt {
		for i := range bs {
			out = append(out, uint32(c)*100+uint32(i))
		}
	}
	return out
}

// store feeds worker's Stored event for prompt, as an engine emits it when
// the first cached blocks were already present.
func store(t interface{ Helper() }, r interface{ KVEvent(uint64, kv.Event) }, worker uint64, prompt string, cached int) {
	t.Helper()
	ls, ss := kv.BlockHashes(tokens(prompt), bs, nil, nil)
	ev := kv.Event{Kind: kv.Stored}
	if cached > 0 {
		ev.Parent, ev.HasParent = ss[cached-1], true
	}
	for i := cached; i < len(ls); i++ {
		ev.Blocks = append(ev.Blocks, kv.Block{Hash: ss[i], TokensHash: ls[i]})
	}
	r.KVEvent(worker, ev)
}

// leases keeps the lease of every request a test routes, under its router
// and id, so that tests can end requests by id as the router's callers
// end them by lease.
var leases sync.Map // leaseKey → router.Lease

type leaseKey struct {
	r  *router.Router
	id string
}

// routeByID is r.RouteLease, keeping the lease under req.ID.
func routeByID(r *router.Router, req *router.Request) (uint64, error) {
	w, l, err := r.RouteLease(req)
	if err == nil {
		leases.Store(leaseKey{r, req.ID}, l)
	}
	return w, err
}

// routeDisaggByID is r.RouteDisaggLease, keeping the lease under req.ID.
func routeDisaggByID(r *router.Router, req *router.Request) (prefill, decode uint64, err error) {
	prefill, decode, l, err := r.RouteDisaggLease(req)
	if err == nil {
		leases.Store(leaseKey{r, req.ID}, l)
	}
	return prefill, decode, err
}

// leaseOf is the lease of the request routed as id (the zero Lease, which
// the router ignores, when there is none).
func leaseOf(r *router.Router, id string) router.Lease {
	l, _ := leases.Load(leaseKey{r, id})
	lease, _ := l.(router.Lease)
	return lease
}

// prefillDoneByID is r.PrefillDoneLease for the request routed as id.
func prefillDoneByID(r *router.Router, id string) { r.PrefillDoneLease(leaseOf(r, id)) }

// freeByID is r.FreeLease for the request routed as id.
func freeByID(r *router.Router, id string) { r.FreeLease(leaseOf(r, id)) }

func newRouter(t *testing.T, mutate func(*router.Config), workers ...router.WorkerInfo) *router.Router {
	t.Helper()
	cfg := router.DefaultConfig()
	cfg.BlockSize = bs
	cfg.Mode = router.ModeKV
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := router.New(cfg)
	require.NoError(t, err)
	for _, w := range workers {
		require.NoError(t, r.AddWorker(w))
	}
	return r
}

func agg(ids ...uint64) []router.WorkerInfo {
	out := make([]router.WorkerInfo, len(ids))
	for i, id := range ids {
		out[i] = router.WorkerInfo{ID: id, Role: router.RoleAggregated, TotalBlocks: 100, BlockSize: bs}
	}
	return out
}

func route(t *testing.T, r *router.Router, id, prompt string) uint64 {
	t.Helper()
	w, err := routeByID(r, &router.Request{ID: id, Tokens: tokens(prompt)})
	require.NoError(t, err)
	return w
}

const (
	workerA uint64 = 10
	workerB uint64 = 20
)

// TestRouter_DecisionScenario replays Dynamo's router-decision e2e case.
// Stored: AB and ACD on a, ACE on b, so a holds {A,B,C,D} (4 blocks) and b
// holds {A,C,E} (3 blocks). ACDF matches 3 blocks on a and 2 on b: with equal
// loads a's cost is lower (1+4 < 2+4 in blocks), so a. ACG matches 2 blocks
// on both, an exact cost tie, which goes to b, the smaller tree.
func TestRouter_DecisionScenario(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil, agg(workerA, workerB)...)
	store(t, r, workerA, "AB", 0)
	store(t, r, workerA, "ACD", 1)
	store(t, r, workerB, "ACE", 0)
	a, _ := r.Worker(workerA)
	b, _ := r.Worker(workerB)
	require.Equal(t, 4, a.TreeSize)
	require.Equal(t, 3, b.TreeSize)

	assert.Equal(t, workerA, route(t, r, "acdf", "ACDF"), "longest prefix")
	store(t, r, workerA, "ACDF", 3) // a caches F as it serves the request
	prefillDoneByID(r, "acdf")
	freeByID(r, "acdf")

	assert.Equal(t, workerB, route(t, r, "acg", "ACG"), "cost tie goes to the smaller tree")
}

// TestRouter_TreeSizeBreaksCostTie checks the tie-break is the tree size and
// not worker order: once b holds more blocks than a, the same tie goes to a.
func TestRouter_TreeSizeBreaksCostTie(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil, agg(workerA, workerB)...)
	store(t, r, workerA, "AC", 0)
	store(t, r, workerB, "AC", 0)
	store(t, r, workerB, "XYZ", 0) // unrelated blocks make b's tree larger
	assert.Equal(t, workerA, route(t, r, "acg", "ACG"))
}

func TestRouter_LoadTracking(t *testing.T) {
	t.Parallel()
	r := newRouter(t, func(c *router.Config) { c.Mode = router.ModeRoundRobin }, agg(1)...)
	store(t, r, 1, "AB", 0)

	route(t, r, "r1", "ABC") // A, B cached: 1 block uncached
	route(t, r, "r2", "ABDE")
	w, _ := r.Worker(1)
	assert.Equal(t, 2, w.InFlight)
	assert.Equal(t, 4+8, w.PrefillTokens, "uncached prompt tokens: C, then D and E")
	assert.Equal(t, 5, w.ActiveBlocks, "A and B are shared: A B C D E")

	prefillDoneByID(r, "r1")
	prefillDoneByID(r, "r1") // repeats are harmless
	w, _ = r.Worker(1)
	assert.Equal(t, 8, w.PrefillTokens)
	assert.Equal(t, 2, w.InFlight)

	freeByID(r, "r2") // never reported its first token: its tokens go too
	w, _ = r.Worker(1)
	assert.Equal(t, 0, w.PrefillTokens)
	assert.Equal(t, 3, w.ActiveBlocks, "r1 still holds A B C")
	assert.Equal(t, 1, w.InFlight)

	freeByID(r, "r1")
	freeByID(r, "r1")
	w, _ = r.Worker(1)
	assert.Equal(t, router.WorkerState{Info: w.Info, TreeSize: 2}, w, "everything released")
	assert.Equal(t, 0, r.InFlight())
}

func TestRouter_BusyThresholds(t *testing.T) {
	t.Parallel()
	frac := 0.5
	maxTokens := int64(8)
	r := newRouter(t, func(c *router.Config) {
		c.Mode = router.ModeRoundRobin
		c.ActiveDecodeBlocksThreshold = &frac
		c.ActivePrefillTokensThreshold = &maxTokens
	}, agg(1, 2)...)

	// Worker 1 reports 60 of 100 blocks active: over half, so busy.
	r.UpdateLoad(1, router.Load{RouterActiveBlocks: 60, ActiveBlocks: 60, TotalBlocks: 100})
	for i := range 4 {
		assert.Equal(t, uint64(2), route(t, r, fmt.Sprint("r", i), ""), "request %d", i)
	}
	// Worker 1's reported total can move the limit: 60 of 200 is not busy.
	r.UpdateLoad(1, router.Load{RouterActiveBlocks: 60, TotalBlocks: 200})
	w, _ := r.Worker(1)
	assert.False(t, w.Busy)

	// Pending prefill: 12 uncached tokens on each worker is over 8.
	assert.Equal(t, uint64(1), route(t, r, "p1", "XYZ"))
	assert.Equal(t, uint64(2), route(t, r, "p2", "XYZ"))
	_, err := routeByID(r, &router.Request{ID: "p3", Tokens: tokens("Q")})
	require.Error(t, err)
	assert.ErrorIs(t, err, router.ErrAllBusy)
	assert.True(t, errors.Is(err, router.ErrAllBusy))
	assert.Contains(t, err.Error(), "all workers busy")
	var be *router.BusyError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, router.RoleAggregated, be.Role)
	assert.Equal(t, 2, be.Workers)
	assert.Equal(t, uint64(1), r.Stats().RejectedBusy)

	// First tokens clear the pending prefill and the workers return.
	prefillDoneByID(r, "p2")
	assert.Equal(t, uint64(2), route(t, r, "p4", "Q"))
}

func TestRouter_PredictedBlocksMarkBusy(t *testing.T) {
	t.Parallel()
	frac := 0.1 // 10 of 100 blocks
	r := newRouter(t, func(c *router.Config) { c.ActiveDecodeBlocksThreshold = &frac }, agg(1)...)
	route(t, r, "long", "ABCDEFGHIJK") // 11 blocks, no report needed
	_, err := routeByID(r, &router.Request{ID: "next", Tokens: tokens("A")})
	assert.ErrorIs(t, err, router.ErrAllBusy)
	freeByID(r, "long")
	route(t, r, "next", "A")
}

func TestRouter_NoWorkersOfRole(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil, router.WorkerInfo{ID: 1, Role: router.RoleDecode})
	_, err := routeByID(r, &router.Request{ID: "x", Tokens: tokens("A")})
	assert.ErrorIs(t, err, router.ErrNoWorkers)
	assert.NotErrorIs(t, err, router.ErrAllBusy)
	_, _, err = routeDisaggByID(r, &router.Request{ID: "y", Tokens: tokens("A")})
	assert.ErrorIs(t, err, router.ErrNoWorkers)
	assert.ErrorContains(t, err, "prefill")
}

func TestRouter_RemovedWorkerIsNeverPicked(t *testing.T) {
	t.Parallel()
	for _, mode := range router.Modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			r := newRouter(t, func(c *router.Config) { c.Mode = mode }, agg(1, 2, 3)...)
			store(t, r, 2, "ABCD", 0) // kv mode would favour 2
			route(t, r, "inflight", "ABCD")
			assert.True(t, r.RemoveWorker(2))
			assert.False(t, r.RemoveWorker(2))
			store(t, r, 2, "ABCD", 0) // late events from the removed worker
			r.UpdateLoad(2, router.Load{})
			for i := range 50 {
				w := route(t, r, fmt.Sprint(i), "ABCD")
				assert.NotEqual(t, uint64(2), w)
			}
			_, ok := r.Worker(2)
			assert.False(t, ok)
			s := r.Stats()
			assert.Equal(t, uint64(1), s.EventsIgnored)
			assert.Equal(t, uint64(1), s.LoadsIgnored)
			freeByID(r, "inflight") // its worker is gone: nothing left to release, no panic
		})
	}
}

func TestRouter_RemoveWorkerReleasesItsRequests(t *testing.T) {
	t.Parallel()
	r := newRouter(t, func(c *router.Config) { c.Mode = router.ModeRoundRobin }, agg(1, 2)...)
	route(t, r, "a", "AB") // worker 1
	route(t, r, "b", "AB") // worker 2
	r.RemoveWorker(1)
	assert.Equal(t, 1, r.InFlight())
	w, _ := r.Worker(2)
	assert.Equal(t, 2, w.ActiveBlocks, "worker 2's share of the blocks stays")
}

func TestRouter_RouteDisagg(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil,
		router.WorkerInfo{ID: 1, Role: router.RolePrefill},
		router.WorkerInfo{ID: 2, Role: router.RolePrefill},
		router.WorkerInfo{ID: 3, Role: router.RoleDecode},
		router.WorkerInfo{ID: 4, Role: router.RoleDecode},
	)
	store(t, r, 2, "ABC", 0)
	// Decode workers' caches must not pull the decode choice (weight 0).
	store(t, r, 4, "ABC", 0)

	p, d, err := routeDisaggByID(r, &router.Request{ID: "r1", Tokens: tokens("ABCD")})
	require.NoError(t, err)
	assert.Equal(t, uint64(2), p, "prefill by prefix overlap")
	assert.Equal(t, uint64(3), d, "decode tie on active blocks goes to the smaller tree")

	ws, _ := r.Worker(2)
	assert.Equal(t, 4, ws.PrefillTokens, "D is uncached")
	assert.Equal(t, 1, ws.InFlight)
	assert.Equal(t, 0, ws.ActiveBlocks, "prefill workers carry tokens, not blocks")
	ws, _ = r.Worker(3)
	assert.Equal(t, 4, ws.ActiveBlocks)
	assert.Equal(t, 0, ws.PrefillTokens)

	// A second request sees decode 3 loaded and goes to 4; decode blocks are
	// never shared, even for the same prompt.
	_, d2, err := routeDisaggByID(r, &router.Request{ID: "r2", Tokens: tokens("ABCD")})
	require.NoError(t, err)
	assert.Equal(t, uint64(4), d2)

	prefillDoneByID(r, "r1")
	ws, _ = r.Worker(2)
	assert.Equal(t, 1, ws.InFlight, "r2's prefill is still there")
	prefillDoneByID(r, "r2")
	ws, _ = r.Worker(2)
	assert.Equal(t, router.WorkerState{Info: ws.Info, TreeSize: 3}, ws, "prefill worker is done at first token")
	ws, _ = r.Worker(3)
	assert.Equal(t, 4, ws.ActiveBlocks, "decode holds until Free")
	freeByID(r, "r1")
	freeByID(r, "r2")
	assert.Equal(t, 0, r.InFlight())
	for _, id := range []uint64{3, 4} {
		ws, _ = r.Worker(id)
		assert.Zero(t, ws.ActiveBlocks)
		assert.Zero(t, ws.InFlight)
	}
}

func TestRouter_RouteDisaggRejectsWithoutChargingPrefill(t *testing.T) {
	t.Parallel()
	frac := 0.5
	r := newRouter(t, func(c *router.Config) { c.ActiveDecodeBlocksThreshold = &frac },
		router.WorkerInfo{ID: 1, Role: router.RolePrefill, TotalBlocks: 10},
		router.WorkerInfo{ID: 2, Role: router.RoleDecode, TotalBlocks: 10},
	)
	r.UpdateLoad(2, router.Load{RouterActiveBlocks: 9})
	_, _, err := routeDisaggByID(r, &router.Request{ID: "x", Tokens: tokens("AB")})
	require.ErrorIs(t, err, router.ErrAllBusy)
	assert.ErrorContains(t, err, "all decode workers busy")
	var be *router.BusyError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, router.RoleDecode, be.Role)
	ws, _ := r.Worker(1)
	assert.Zero(t, ws.InFlight)
	assert.Zero(t, ws.PrefillTokens)
	assert.Equal(t, 0, r.InFlight())
}

func TestRouter_ApproximateModeLearnsRoutesAndForgets(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := router.DefaultConfig()
	cfg.Mode, cfg.BlockSize, cfg.UseKVEvents, cfg.RouterTTLSecs = router.ModeKV, bs, false, 60
	r, err := router.New(cfg, router.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	for _, w := range agg(1, 2) {
		require.NoError(t, r.AddWorker(w))
	}
	store(t, r, 2, "ABCD", 0) // ignored: no events in approximate mode
	assert.Equal(t, uint64(1), r.Stats().EventsIgnored)

	first := route(t, r, "r1", "ABCD")
	freeByID(r, "r1")
	other := 3 - first
	for i := range 5 {
		assert.Equal(t, first, route(t, r, fmt.Sprint("again", i), "ABCE"), "the prefix routed before is assumed cached")
		freeByID(r, fmt.Sprint("again", i))
	}
	// Load the first worker (AB pulls the request there) so the other is
	// cheaper once the cache credit is gone.
	require.Equal(t, first, route(t, r, "busy", "ABXY"))
	now = now.Add(61 * time.Second)
	assert.Equal(t, other, route(t, r, "late", "ABCD"), "TTL passed: no overlap credit")
	ws, _ := r.Worker(first)
	assert.Equal(t, 0, ws.TreeSize, "everything learned before the TTL expired")
	ws, _ = r.Worker(other)
	assert.Equal(t, 4, ws.TreeSize)
}

func TestRouter_ConcurrentUse(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil, agg(1, 2, 3, 4)...)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				id := fmt.Sprintf("g%d-%d", g, i)
				if _, err := routeByID(r, &router.Request{ID: id, Tokens: tokens("ABCDEFGH"[:1+i%8])}); err != nil {
					t.Error(err)
					return
				}
				prefillDoneByID(r, id)
				freeByID(r, id)
			}
		})
	}
	for w := range uint64(4) {
		wg.Go(func() {
			for i := range 200 {
				store(t, r, w+1, "ABCDEFGH"[:1+i%8], 0)
				r.UpdateLoad(w+1, router.Load{ActiveBlocks: i, RouterActiveBlocks: i, TotalBlocks: 100})
				if i%50 == 0 {
					r.KVEvent(w+1, kv.Event{Kind: kv.Cleared})
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 0, r.InFlight())
	for _, ws := range r.Workers() {
		assert.Zero(t, ws.InFlight)
		assert.Zero(t, ws.ActiveBlocks)
		assert.Zero(t, ws.PrefillTokens)
	}
}

func TestBusyError_NamesTheRole(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		role router.Role
		want string
	}{
		{router.RolePrefill, "all prefill workers busy"},
		{router.RoleDecode, "all decode workers busy"},
		{router.RoleAggregated, "all workers busy"},
	} {
		err := error(&router.BusyError{Role: tc.role, Workers: 1})
		assert.Equal(t, tc.want, err.Error())
		assert.ErrorIs(t, err, router.ErrAllBusy)
		assert.NotErrorIs(t, err, router.ErrNoWorkers)
	}
}

func TestRouter_RouteDisaggBusyPrefillNamesPrefill(t *testing.T) {
	t.Parallel()
	limit := int64(4)
	r := newRouter(t, func(c *router.Config) { c.ActivePrefillTokensThreshold = &limit },
		router.WorkerInfo{ID: 1, Role: router.RolePrefill, TotalBlocks: 10},
		router.WorkerInfo{ID: 2, Role: router.RoleDecode, TotalBlocks: 10},
	)
	_, _, err := routeDisaggByID(r, &router.Request{ID: "a", Tokens: tokens("ABC")})
	require.NoError(t, err)
	_, _, err = routeDisaggByID(r, &router.Request{ID: "b", Tokens: tokens("D")})
	var be *router.BusyError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, router.RolePrefill, be.Role)
	assert.ErrorContains(t, err, "all prefill workers busy")
}

// TestRouter_BusyThresholdsAreStrict pins each busy threshold's boundary: a
// worker exactly at the limit is still free, one block or token over it is
// busy.
func TestRouter_BusyThresholdsAreStrict(t *testing.T) {
	t.Parallel()
	half := 0.5
	blocks := func(c *router.Config) { c.ActiveDecodeBlocksThreshold = &half }
	tokensAt := func(n int64) func(*router.Config) {
		return func(c *router.Config) { c.ActivePrefillTokensThreshold = &n }
	}
	frac := func(c *router.Config) { c.ActivePrefillTokensThresholdFrac = &half }
	report := func(active int) func(*testing.T, *router.Router) {
		return func(_ *testing.T, r *router.Router) {
			r.UpdateLoad(1, router.Load{RouterActiveBlocks: active, ActiveBlocks: active, TotalBlocks: 100})
		}
	}
	prompt := func(letters int) func(*testing.T, *router.Router) {
		return func(t *testing.T, r *router.Router) { route(t, r, "p", strings.Repeat("A", letters)) }
	}
	tests := []struct {
		name   string
		mutate func(*router.Config)
		load   func(*testing.T, *router.Router) // puts worker 1 at its load
		busy   bool
	}{
		// 0.5 of worker 1's 100 blocks is 50.
		{"reported blocks at the limit", blocks, report(50), false},
		{"reported blocks one over", blocks, report(51), true},
		{"predicted blocks at the limit", blocks, prompt(50), false},
		{"predicted blocks one over", blocks, prompt(51), true},
		// A two-letter prompt leaves 2×bs tokens to prefill.
		{"prefill tokens at the limit", tokensAt(2 * bs), prompt(2), false},
		{"prefill tokens one over", tokensAt(2*bs - 1), prompt(2), true},
		// 0.5 of worker 1's max_num_batched_tokens (4×bs) is 2×bs tokens.
		{"prefill token fraction at the limit", frac, prompt(2), false},
		{"prefill token fraction over", frac, prompt(3), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRouter(t, func(c *router.Config) {
				c.Mode = router.ModeRoundRobin
				tc.mutate(c)
			}, router.WorkerInfo{ID: 1, Role: router.RoleAggregated, TotalBlocks: 100, BlockSize: bs, MaxBatchedTokens: 4 * bs})
			tc.load(t, r)
			ws, ok := r.Worker(1)
			require.True(t, ok)
			assert.Equal(t, tc.busy, ws.Busy)
			_, err := routeByID(r, &router.Request{ID: "next", Tokens: tokens("Z")})
			if tc.busy {
				assert.ErrorIs(t, err, router.ErrAllBusy)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}

// TestRouter_DataParallelRanks registers two workers of four data-parallel
// ranks each, one target per (worker, rank), as Dynamo's router-decision
// test does (2 × dp 4). A prefix stored by one rank is indexed for that
// rank only, and every request sharing the prefix goes to that (worker,
// rank) pair.
func TestRouter_DataParallelRanks(t *testing.T) {
	t.Parallel()
	const ranks = 4
	target := func(worker, rank uint64) uint64 { return worker*100 + rank }
	var infos []router.WorkerInfo
	for _, w := range []uint64{1, 2} {
		for rank := range uint64(ranks) {
			infos = append(infos, router.WorkerInfo{ID: target(w, rank), Role: router.RoleAggregated,
				DPRank: uint32(rank), TotalBlocks: 100, BlockSize: bs})
		}
	}
	r := newRouter(t, nil, infos...)

	ls, ss := kv.BlockHashes(tokens("ABCD"), bs, nil, nil)
	ev := kv.Event{Kind: kv.Stored, DPRank: 2}
	for i := range ls {
		ev.Blocks = append(ev.Blocks, kv.Block{Hash: ss[i], TokensHash: ls[i]})
	}
	want := target(2, 2)
	r.KVEvent(want, ev)

	ws := r.Workers()
	require.Len(t, ws, 2*ranks, "one target per (worker, rank)")
	for _, w := range ws {
		assert.Equal(t, uint32(w.Info.ID%100), w.Info.DPRank, "target %d", w.Info.ID)
		if w.Info.ID == want {
			assert.Equal(t, 4, w.TreeSize)
		} else {
			assert.Zero(t, w.TreeSize, "target %d: another rank's blocks are not its own", w.Info.ID)
		}
	}

	for i, suffix := range []string{"E", "F", "G", "H", "I", "J", "K", "L"} {
		id := fmt.Sprintf("r%d", i)
		assert.Equal(t, want, route(t, r, id, "ABCD"+suffix), "request %s", id)
		if i < 7 { // the last stays in flight
			prefillDoneByID(r, id)
			freeByID(r, id)
		}
	}
	got, ok := r.Worker(want)
	require.True(t, ok)
	assert.Equal(t, 1, got.InFlight, "load is the rank's own")
	assert.Equal(t, 5, got.ActiveBlocks)
	other, _ := r.Worker(target(2, 0))
	assert.Zero(t, other.InFlight, "rank 0 of the same worker carries none of it")
}
