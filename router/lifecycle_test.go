package router_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/router"
)

// TestRouter_EventsBeforeRegistrationAreKept: under a distributed transport a
// worker's KV events can arrive before discovery announces it. They go to
// the index at once; the worker becomes routable, with its cache known, at
// AddWorker. A removed worker's late events are dropped until it is added
// again.
func TestRouter_EventsBeforeRegistrationAreKept(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil, agg(workerA)...)
	store(t, r, workerB, "ABCD", 0)
	assert.Equal(t, workerA, route(t, r, "1", "ABCD"), "an unregistered worker is not routable")
	freeByID(r, "1")

	require.NoError(t, r.AddWorker(agg(workerB)[0]))
	ws, _ := r.Worker(workerB)
	assert.Equal(t, 4, ws.TreeSize, "the early event was applied")
	assert.Equal(t, uint64(1), r.Stats().EventsEarly)
	assert.Equal(t, workerB, route(t, r, "2", "ABCD"), "its cache counts once registered")
	freeByID(r, "2")

	require.True(t, r.RemoveWorker(workerB))
	ignored := r.Stats().EventsIgnored
	store(t, r, workerB, "ABCD", 0)
	assert.Equal(t, ignored+1, r.Stats().EventsIgnored, "a removed worker's late event is dropped")
	require.NoError(t, r.AddWorker(agg(workerB)[0]))
	ws, _ = r.Worker(workerB)
	assert.Zero(t, ws.TreeSize, "nothing of the late event was kept")
	store(t, r, workerB, "ABCD", 0)
	ws, _ = r.Worker(workerB)
	assert.Equal(t, 4, ws.TreeSize, "adding the worker again lifts the tombstone")

	// Discovery removing a worker it never announced drops its early state.
	const early = 30
	store(t, r, early, "AB", 0)
	assert.False(t, r.RemoveWorker(early))
	store(t, r, early, "ABC", 0)
	require.NoError(t, r.AddWorker(agg(early)[0]))
	ws, _ = r.Worker(early)
	assert.Zero(t, ws.TreeSize)
}

// TestRouter_RequestTTLExpiresForgottenRequests: a request whose Free never
// comes stops charging its worker router_request_ttl_secs (300 s by
// default) after it was routed, as Dynamo force-expires it.
func TestRouter_RequestTTLExpiresForgottenRequests(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000, 0)
	cfg := router.DefaultConfig()
	cfg.BlockSize, cfg.Mode = bs, router.ModeKV
	r, err := router.New(cfg, router.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(agg(workerA)[0]))

	route(t, r, "old", "ABCD")
	now = now.Add(299 * time.Second)
	route(t, r, "new", "EF")
	ws, _ := r.Worker(workerA)
	assert.Equal(t, 2, ws.InFlight)

	now = now.Add(time.Second) // "old" is 300 s old
	route(t, r, "probe", "G")
	freeByID(r, "probe")
	ws, _ = r.Worker(workerA)
	assert.Equal(t, 1, ws.InFlight, "the forgotten request no longer counts")
	assert.Equal(t, 2, ws.ActiveBlocks, "only EF's blocks remain")
	assert.Equal(t, 2*bs, ws.PrefillTokens)
	assert.Equal(t, 1, r.InFlight())
	assert.Equal(t, uint64(1), r.Stats().ExpiredRequests)

	freeByID(r, "old") // late: a no-op
	prefillDoneByID(r, "new")
	freeByID(r, "new")
	ws, _ = r.Worker(workerA)
	assert.Zero(t, ws.InFlight)
	assert.Zero(t, ws.ActiveBlocks)
	assert.Zero(t, ws.PrefillTokens)
}

// TestRouter_RequestTTLCountsFromTheLatestRouting: a request id freed and
// routed again (its state recycled for the new routing) ages from the new
// routing, though an older request routed before its first routing is
// still in flight; and the blocks a recycled state charges are the new
// prompt's.
func TestRouter_RequestTTLCountsFromTheLatestRouting(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_000, 0)
	now := start
	at := func(s int) { now = start.Add(time.Duration(s) * time.Second) }
	cfg := router.DefaultConfig()
	cfg.BlockSize, cfg.Mode = bs, router.ModeKV
	r, err := router.New(cfg, router.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(agg(workerA)[0]))
	probe := func() router.WorkerState {
		route(t, r, "probe", "G")
		freeByID(r, "probe")
		ws, _ := r.Worker(workerA)
		return ws
	}

	route(t, r, "old", "Q") // holds the age queue's head until 300 s
	at(10)
	route(t, r, "x", "ABCD")
	freeByID(r, "x")
	at(200)
	route(t, r, "x", "EF")
	at(320) // "old" and the first routing of x are over 300 s old
	ws := probe()
	assert.Equal(t, 1, ws.InFlight, "x was routed again 120 s ago")
	assert.Equal(t, 2, ws.ActiveBlocks, "x holds EF's blocks")
	assert.Equal(t, uint64(1), r.Stats().ExpiredRequests)

	at(500) // the second routing of x is 300 s old
	ws = probe()
	assert.Zero(t, ws.InFlight)
	assert.Zero(t, ws.ActiveBlocks)
	assert.Equal(t, uint64(2), r.Stats().ExpiredRequests)
}

// TestRouter_PrefillTokensThresholdFrac: with
// active_prefill_tokens_threshold_frac a worker is busy while its pending
// prefill tokens exceed the fraction of its max_num_batched_tokens, 10M
// when discovery does not say.
func TestRouter_PrefillTokensThresholdFrac(t *testing.T) {
	t.Parallel()
	cfg, err := router.ParseConfig([]byte(`{"router_mode":"kv","block_size":4,"active_prefill_tokens_threshold_frac":1e-6}`))
	require.NoError(t, err)
	r, err := router.New(cfg)
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(agg(workerA)[0]))
	route(t, r, "a", "AB") // 8 tokens, not over 10
	route(t, r, "b", "C")  // 12 tokens pending, over 10
	_, err = routeByID(r, &router.Request{ID: "c", Tokens: tokens("D")})
	require.ErrorIs(t, err, router.ErrAllBusy)
	prefillDoneByID(r, "b")
	route(t, r, "c", "D")

	// A worker that reports max_num_batched_tokens is measured against it.
	half := 0.5
	r = newRouter(t, func(c *router.Config) { c.ActivePrefillTokensThresholdFrac = &half },
		router.WorkerInfo{ID: 1, Role: router.RoleAggregated, MaxBatchedTokens: 16})
	route(t, r, "a", "AB") // 8 tokens: at the limit, not over
	route(t, r, "b", "C")  // 12
	_, err = routeByID(r, &router.Request{ID: "c", Tokens: tokens("D")})
	require.ErrorIs(t, err, router.ErrAllBusy)
	ws, _ := r.Worker(1)
	assert.True(t, ws.Busy)
}

// TestRouter_RejectedDisaggLeavesSelectionState: a disaggregated request
// the decode pool refuses must not advance round-robin or spend random
// draws on the prefill side, so later choices are the same as if it had
// never come.
func TestRouter_RejectedDisaggLeavesSelectionState(t *testing.T) {
	t.Parallel()
	for _, mode := range []router.Mode{router.ModeRoundRobin, router.ModeRandom, router.ModePowerOfTwo} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			limit := 0.5
			build := func() *router.Router {
				return newRouter(t, func(c *router.Config) {
					c.Mode, c.Seed, c.ActiveDecodeBlocksThreshold = mode, 7, &limit
				},
					router.WorkerInfo{ID: 1, Role: router.RolePrefill, TotalBlocks: 10},
					router.WorkerInfo{ID: 2, Role: router.RolePrefill, TotalBlocks: 10},
					router.WorkerInfo{ID: 3, Role: router.RolePrefill, TotalBlocks: 10},
					router.WorkerInfo{ID: 9, Role: router.RoleDecode, TotalBlocks: 1000},
				)
			}
			rejected, clean := build(), build()
			rejected.UpdateLoad(9, router.Load{RouterActiveBlocks: 900})
			_, _, err := routeDisaggByID(rejected, &router.Request{ID: "x", Tokens: tokens("AB")})
			require.ErrorIs(t, err, router.ErrAllBusy)
			rejected.UpdateLoad(9, router.Load{})
			for i := range 6 {
				id := string(rune('a' + i))
				p1, _, err := routeDisaggByID(rejected, &router.Request{ID: id, Tokens: tokens("AB")})
				require.NoError(t, err)
				p2, _, err := routeDisaggByID(clean, &router.Request{ID: id, Tokens: tokens("AB")})
				require.NoError(t, err)
				assert.Equal(t, p2, p1, "request %s", id)
				freeByID(rejected, id)
				freeByID(clean, id)
			}
		})
	}
}

// blockingHandler is a log handler that, like a clock or sink shared with
// the rest of a program, takes a lock of its own.
type blockingHandler struct {
	mu      *sync.Mutex
	entered chan<- struct{}
}

func (h blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h blockingHandler) Handle(context.Context, slog.Record) error {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	h.mu.Lock()
	h.mu.Unlock() //nolint:staticcheck // the lock is only waited for
	return nil
}
func (h blockingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h blockingHandler) WithGroup(string) slog.Handler      { return h }

// TestRouter_ClockAndLoggerRunOutsideTheLock: the clock and the log handler
// may take a lock that another goroutine holds while it calls the router
// (a virtual-time driver, a shared log sink). The router must not call them
// while holding its own mutex, or the two goroutines deadlock.
func TestRouter_ClockAndLoggerRunOutsideTheLock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// setup builds the router around the outside lock; trigger makes the
		// router call the clock or the logger.
		setup   func(mu *sync.Mutex, entered chan<- struct{}) *router.Router
		trigger func(r *router.Router)
	}{
		{
			name: "clock",
			setup: func(mu *sync.Mutex, entered chan<- struct{}) *router.Router {
				cfg := router.DefaultConfig()
				cfg.BlockSize, cfg.Mode, cfg.UseKVEvents = bs, router.ModeKV, false
				r, err := router.New(cfg, router.WithClock(func() time.Time {
					select {
					case entered <- struct{}{}:
					default:
					}
					mu.Lock()
					mu.Unlock() //nolint:staticcheck // the lock is only waited for
					return time.Unix(1, 0)
				}))
				require.NoError(t, err)
				require.NoError(t, r.AddWorker(agg(workerA)[0]))
				return r
			},
			trigger: func(r *router.Router) { _, _ = routeByID(r, &router.Request{ID: "a", Tokens: tokens("AB")}) },
		},
		{
			name: "logger",
			setup: func(mu *sync.Mutex, entered chan<- struct{}) *router.Router {
				cfg := router.DefaultConfig()
				cfg.BlockSize = bs
				r, err := router.New(cfg, router.WithLogger(slog.New(blockingHandler{mu, entered})))
				require.NoError(t, err)
				require.NoError(t, r.AddWorker(agg(workerA)[0]))
				return r
			},
			// A Stored event under an unknown parent is logged.
			trigger: func(r *router.Router) {
				r.KVEvent(workerA, kv.Event{Kind: kv.Stored, Parent: 5, HasParent: true, Blocks: []kv.Block{{Hash: 6, TokensHash: 7}}})
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			entered := make(chan struct{}, 1)
			r := tc.setup(&mu, entered)
			mu.Lock()
			done := make(chan struct{})
			go func() {
				defer close(done)
				tc.trigger(r)
			}()
			<-entered
			stats := make(chan struct{})
			go func() {
				defer close(stats)
				_ = r.Stats()
			}()
			select {
			case <-stats:
			case <-time.After(5 * time.Second):
				t.Errorf("the router held its mutex while calling the %s", tc.name)
			}
			mu.Unlock()
			<-done
			<-stats
		})
	}
}
