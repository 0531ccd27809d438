package router

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCandidates_MatchScan checks the role lists candidates serves without
// a scan against a scan of every registered worker, through registrations,
// removals and role changes, with and without a busy threshold.
func TestCandidates_MatchScan(t *testing.T) {
	t.Parallel()
	roles := []Role{RoleAggregated, RolePrefill, RoleDecode}
	for _, gated := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.BlockSize = 4
		if gated {
			limit := int64(10)
			cfg.ActivePrefillTokensThreshold = &limit
		}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		req := &Request{ID: "probe"}
		for step := range 2000 {
			id := uint64(rng.IntN(40) + 1)
			switch rng.IntN(4) {
			case 0:
				r.RemoveWorker(id)
			case 1:
				if w := r.workers[id]; w != nil {
					w.prefill = rng.IntN(20)
				}
			default:
				if err := r.AddWorker(WorkerInfo{ID: id, Role: roles[rng.IntN(len(roles))]}); err != nil {
					t.Fatal(err)
				}
			}
			for _, role := range roles {
				ri, _ := role.index()
				var want []*worker
				total := 0
				for _, w := range r.order {
					if w.role == ri {
						total++
						if !r.busy(w) {
							want = append(want, w)
						}
					}
				}
				got, err := r.candidates(role, req, &r.cands)
				if (err != nil) != (len(want) == 0) || !slices.Equal(got, want) {
					t.Fatalf("gated %v, step %d, role %s: candidates %d workers (%v), a scan finds %d of %d",
						gated, step, role, len(got), err, len(want), total)
				}
			}
		}
	}
}
