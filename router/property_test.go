package router_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvstrand/mocker/router"
)

// TestRouter_NeverPicksRemovedOrBusy drives random sequences of worker
// additions and removals, load reports, KV events and routes in every mode,
// and checks each choice against the test's own view: the worker is
// registered, has the right role, and is not over a threshold. A rejection
// must be ErrNoWorkers exactly when no worker of the role is registered and
// ErrAllBusy exactly when all of them are busy. Finally, freeing everything
// must leave no load behind.
func TestRouter_NeverPicksRemovedOrBusy(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		frac := rapid.Float64Range(0.05, 1).Draw(t, "frac")
		maxTokens := rapid.Int64Range(0, 40).Draw(t, "maxTokens")
		cfg := router.DefaultConfig()
		cfg.BlockSize = bs
		cfg.Mode = rapid.SampledFrom(router.Modes).Draw(t, "mode")
		cfg.RouterTemperature = rapid.SampledFrom([]float64{0, 0.5}).Draw(t, "temp")
		cfg.UseKVEvents = rapid.Bool().Draw(t, "events")
		cfg.Seed = rapid.Uint64().Draw(t, "seed")
		if rapid.Bool().Draw(t, "blocksThreshold") {
			cfg.ActiveDecodeBlocksThreshold = &frac
		}
		if rapid.Bool().Draw(t, "tokensThreshold") {
			cfg.ActivePrefillTokensThreshold = &maxTokens
		}
		r, err := router.New(cfg)
		require.NoError(t, err)

		roles := map[uint64]router.Role{} // the test's registry
		loads := map[uint64]router.Load{}
		totals := map[uint64]int{}
		var inflight []string
		next := 0
		ids := rapid.Uint64Range(1, 6)
		prompts := rapid.SampledFrom([]string{"A", "AB", "ABC", "ABCD", "ABX", "Q", "QR", "QRST"})

		busy := func(st router.WorkerState) bool {
			if cfg.ActiveDecodeBlocksThreshold != nil {
				total := loads[st.Info.ID].TotalBlocks
				if total == 0 {
					total = totals[st.Info.ID]
				}
				limit := frac * float64(total)
				if total > 0 && (float64(loads[st.Info.ID].RouterActiveBlocks) > limit || float64(st.ActiveBlocks) > limit) {
					return true
				}
			}
			return cfg.ActivePrefillTokensThreshold != nil && int64(st.PrefillTokens) > maxTokens
		}
		// free lists the registered workers of role that are not busy in
		// the state seen just before a call, and whether any is registered.
		free := func(before []router.WorkerState, role router.Role) (map[uint64]bool, bool) {
			out, found := map[uint64]bool{}, false
			for _, st := range before {
				require.Equal(t, roles[st.Info.ID], st.Info.Role)
				if st.Info.Role != role {
					continue
				}
				found = true
				if !busy(st) {
					out[st.Info.ID] = true
				}
			}
			require.Len(t, before, len(roles))
			return out, found
		}
		// rejected checks err is the rejection role's state calls for, if
		// any, and reports whether it was one.
		rejected := func(before []router.WorkerState, role router.Role, err error) bool {
			f, found := free(before, role)
			switch {
			case !found:
				require.ErrorIs(t, err, router.ErrNoWorkers)
				require.ErrorContains(t, err, string(role))
			case len(f) == 0:
				require.ErrorIs(t, err, router.ErrAllBusy)
				require.ErrorContains(t, err, string(role))
			default:
				return false
			}
			return true
		}
		picked := func(before []router.WorkerState, role router.Role, got uint64) {
			f, _ := free(before, role)
			require.True(t, f[got], "picked %d; free %s workers: %v", got, role, f)
		}

		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0:
				id := ids.Draw(t, "id")
				role := rapid.SampledFrom([]router.Role{router.RoleAggregated, router.RoleAggregated, router.RolePrefill, router.RoleDecode}).Draw(t, "role")
				if _, ok := roles[id]; ok {
					role = roles[id] // keep the role of a re-announced worker
				}
				total := rapid.IntRange(0, 40).Draw(t, "total")
				require.NoError(t, r.AddWorker(router.WorkerInfo{ID: id, Role: role, TotalBlocks: total}))
				roles[id], totals[id] = role, total
			case 1:
				id := ids.Draw(t, "id")
				_, known := roles[id]
				require.Equal(t, known, r.RemoveWorker(id))
				delete(roles, id)
				delete(loads, id)
				delete(totals, id)
			case 2:
				id := ids.Draw(t, "id")
				l := router.Load{
					RouterActiveBlocks: rapid.IntRange(0, 40).Draw(t, "rab"),
					TotalBlocks:        rapid.IntRange(0, 40).Draw(t, "tb"),
				}
				r.UpdateLoad(id, l)
				if _, ok := roles[id]; ok {
					loads[id] = l
				}
			case 3:
				store(t, r, ids.Draw(t, "id"), prompts.Draw(t, "stored"), 0)
			case 4, 5, 6:
				before := r.Workers()
				id := fmt.Sprint("r", next)
				next++
				got, err := routeByID(r, &router.Request{ID: id, Tokens: tokens(prompts.Draw(t, "prompt"))})
				if !rejected(before, router.RoleAggregated, err) {
					require.NoError(t, err)
					picked(before, router.RoleAggregated, got)
					inflight = append(inflight, id)
				}
			case 7:
				before := r.Workers()
				id := fmt.Sprint("d", next)
				next++
				p, d, err := routeDisaggByID(r, &router.Request{ID: id, Tokens: tokens(prompts.Draw(t, "prompt"))})
				if rejected(before, router.RolePrefill, err) || rejected(before, router.RoleDecode, err) {
					continue
				}
				require.NoError(t, err)
				picked(before, router.RolePrefill, p)
				picked(before, router.RoleDecode, d)
				inflight = append(inflight, id)
			case 8, 9:
				if len(inflight) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(inflight)-1).Draw(t, "which")
				if rapid.Bool().Draw(t, "free") {
					freeByID(r, inflight[i])
					inflight = append(inflight[:i], inflight[i+1:]...)
				} else {
					prefillDoneByID(r, inflight[i])
				}
			}
		}
		for _, id := range inflight {
			freeByID(r, id)
		}
		require.Equal(t, 0, r.InFlight())
		for _, st := range r.Workers() {
			require.Zero(t, st.InFlight, "worker %d", st.Info.ID)
			require.Zero(t, st.ActiveBlocks, "worker %d", st.Info.ID)
			require.Zero(t, st.PrefillTokens, "worker %d", st.Info.ID)
		}
	})
}

// TestRouter_StaleLeasesChangeNothing drives two routers of one config
// through the same random steps, and requires the same choices, the same
// worker states and the same count in flight after every step, while one
// of them also gets calls with leases whose request has ended (freed, or
// expired by the request TTL), even when their state now serves another
// request: such calls must change nothing.
func TestRouter_StaleLeasesChangeNothing(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cfg := router.DefaultConfig()
		cfg.BlockSize = bs
		cfg.Mode = rapid.SampledFrom(router.Modes).Draw(t, "mode")
		cfg.UseKVEvents = rapid.Bool().Draw(t, "events")
		cfg.Seed = rapid.Uint64().Draw(t, "seed")
		if rapid.Bool().Draw(t, "threshold") {
			frac := 0.5
			cfg.ActiveDecodeBlocksThreshold = &frac
		}
		cfg.RouterRequestTTLSecs = 100
		now := time.Unix(1000, 0)
		clock := router.WithClock(func() time.Time { return now })
		quiet := router.WithLogger(slog.New(slog.DiscardHandler))
		byID, err := router.New(cfg, clock, quiet)
		require.NoError(t, err)
		byLease, err := router.New(cfg, clock, quiet)
		require.NoError(t, err)
		both := []*router.Router{byID, byLease}

		type flight struct {
			id    string
			lease router.Lease
		}
		var inflight []flight
		var ended []router.Lease
		next := 0
		ids := rapid.Uint64Range(1, 4)
		prompts := rapid.SampledFrom([]string{"A", "AB", "ABC", "ABX", "Q", "QR"})
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch rapid.IntRange(0, 8).Draw(t, "op") {
			case 0:
				id := ids.Draw(t, "id")
				role := rapid.SampledFrom([]router.Role{router.RoleAggregated, router.RolePrefill, router.RoleDecode}).Draw(t, "role")
				if st, ok := byID.Worker(id); ok {
					role = st.Info.Role
				}
				for _, r := range both {
					require.NoError(t, r.AddWorker(router.WorkerInfo{ID: id, Role: role, TotalBlocks: 8}))
				}
			case 1:
				id := ids.Draw(t, "id")
				require.Equal(t, byID.RemoveWorker(id), byLease.RemoveWorker(id))
			case 2:
				id, prompt := ids.Draw(t, "id"), prompts.Draw(t, "stored")
				for _, r := range both {
					store(t, r, id, prompt, 0)
				}
			case 3, 4:
				id := fmt.Sprint("r", next)
				next++
				prompt := prompts.Draw(t, "prompt")
				var f flight
				var err1, err2 error
				if rapid.Bool().Draw(t, "disagg") {
					p1, d1, err := routeDisaggByID(byID, &router.Request{ID: id, Tokens: tokens(prompt)})
					p2, d2, l, err2b := byLease.RouteDisaggLease(&router.Request{ID: id, Tokens: tokens(prompt)})
					require.Equal(t, [2]uint64{p1, d1}, [2]uint64{p2, d2})
					f, err1, err2 = flight{id, l}, err, err2b
				} else {
					w1, err := routeByID(byID, &router.Request{ID: id, Tokens: tokens(prompt)})
					w2, l, err2b := byLease.RouteLease(&router.Request{ID: id, Tokens: tokens(prompt)})
					require.Equal(t, w1, w2)
					f, err1, err2 = flight{id, l}, err, err2b
				}
				require.Equal(t, err1 == nil, err2 == nil, "%v / %v", err1, err2)
				if err1 == nil {
					inflight = append(inflight, f)
				}
			case 5, 6:
				if len(inflight) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(inflight)-1).Draw(t, "which")
				f := inflight[i]
				if rapid.Bool().Draw(t, "free") {
					freeByID(byID, f.id)
					byLease.FreeLease(f.lease)
					inflight = append(inflight[:i], inflight[i+1:]...)
					ended = append(ended, f.lease)
				} else {
					prefillDoneByID(byID, f.id)
					byLease.PrefillDoneLease(f.lease)
				}
			case 7:
				if len(ended) == 0 {
					continue
				}
				l := ended[rapid.IntRange(0, len(ended)-1).Draw(t, "stale")]
				byLease.PrefillDoneLease(l)
				byLease.FreeLease(l)
				byLease.FreeLease(router.Lease{})
			case 8:
				// Requests routed 100 s or more before the next route expire
				// then; their leases go stale.
				now = now.Add(time.Duration(rapid.IntRange(1, 60).Draw(t, "secs")) * time.Second)
			}
			require.Equal(t, byID.Workers(), byLease.Workers())
			require.Equal(t, byID.InFlight(), byLease.InFlight())
		}
		for _, f := range inflight {
			freeByID(byID, f.id)
			byLease.FreeLease(f.lease)
		}
		require.Zero(t, byLease.InFlight())
		require.Equal(t, byID.Workers(), byLease.Workers())
	})
}
