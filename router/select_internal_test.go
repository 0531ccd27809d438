package router

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

const tbs = 4 // block size of the internal tests

// prompt returns a request of n blocks; the first shared blocks are common
// to every prompt, the rest unique to tag.
func prompt(id string, n int, tag uint32) *Request {
	toks := make([]uint32, 0, n*tbs)
	for b := range n {
		for i := range tbs {
			toks = append(toks, uint32(b)*10+uint32(i)+tag*1000)
		}
	}
	return &Request{ID: id, Tokens: toks}
}

// state is one worker's constructed state for a selection test.
type state struct {
	cached   int // leading request blocks the worker holds (via a KV event)
	active   int // predicted active blocks not shared with the request
	shared   int // leading request blocks active on the worker
	prefill  int // pending prefill tokens
	inflight int
	reported int // reported router-facing active blocks
	extra    int // unrelated indexed blocks, to grow the tree
}

func build(t *testing.T, cfg Config, req *Request, states []state) *Router {
	t.Helper()
	cfg.BlockSize = tbs
	r, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, r.prepare(req))
	for i, s := range states {
		id := uint64(i + 1)
		require.NoError(t, r.AddWorker(WorkerInfo{ID: id, Role: RoleAggregated, TotalBlocks: 1000}))
		w := r.workers[id]
		ev := kv.Event{Kind: kv.Stored}
		for b := range s.cached {
			ev.Blocks = append(ev.Blocks, kv.Block{Hash: req.SeqHashes[b], TokensHash: req.LocalHashes[b]})
		}
		for b := range s.extra {
			ev2 := kv.Event{Kind: kv.Stored, Blocks: []kv.Block{{Hash: kv.SeqHash(1e9 + b), TokensHash: kv.LocalHash(1e9 + b)}}}
			r.KVEvent(id, ev2)
		}
		if len(ev.Blocks) > 0 {
			r.KVEvent(id, ev)
		}
		for b := range s.shared {
			r.ref(req.SeqHashes[b], w)
		}
		w.active += s.active
		w.prefill = s.prefill
		w.inflight = s.inflight
		w.load.RouterActiveBlocks = s.reported
	}
	return r
}

func pickOnce(r *Router, req *Request, weight float64, reuse bool) uint64 {
	cands, err := r.candidates(RoleAggregated, req, &r.cands)
	if err != nil {
		panic(err)
	}
	return r.pick(cands, req, weight, reuse, true).info.ID
}

// TestKV_CostSelection checks the classic cost on hand-computed rows. The
// request has 10 blocks of 4 tokens; costs are in blocks:
// weight × (pending + uncached)/4 + active + (10 − shared).
func TestKV_CostSelection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		weight float64
		states []state
		want   uint64
		why    string
	}{
		{"cache beats nothing", 1, []state{{cached: 8}, {}}, 1, "2+10=12 < 10+10=20"},
		{"load outweighs cache", 1, []state{{cached: 8, active: 10}, {}}, 2, "2+20=22 > 10+10=20"},
		{"heavier weight favours cache", 2, []state{{cached: 8, active: 10}, {}}, 1, "2·2+20=24 < 2·10+10=30"},
		{"pending prefill counts", 1, []state{{prefill: 40}, {active: 5}}, 2, "(40+40)/4+10=30 > 10+15=25"},
		{"weight zero ignores cache", 0, []state{{cached: 10, active: 3}, {active: 2}}, 2, "13 > 12"},
		{"shared active blocks are not new", 1, []state{{shared: 10, active: 2}, {active: 5}}, 1, "10+(12+0)=22 < 10+(5+10)=25"},
		{"third of three", 1, []state{{cached: 2, active: 8}, {cached: 5, active: 5}, {cached: 8, active: 3}}, 3, "26, 20, 15"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Mode = ModeKV
			req := prompt("r", 10, 0)
			r := build(t, cfg, req, tc.states)
			for range 20 { // no randomness may change a strict winner
				assert.Equal(t, tc.want, pickOnce(r, req, tc.weight, true), tc.why)
			}
		})
	}
}

func TestKV_TieGoesToSmallerTreeThenRandom(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Mode = ModeKV
	req := prompt("r", 4, 0)
	r := build(t, cfg, req, []state{{extra: 3}, {extra: 1}, {extra: 2}})
	for range 20 {
		assert.Equal(t, uint64(2), pickOnce(r, req, 1, true))
	}
	r = build(t, cfg, req, []state{{extra: 1}, {extra: 1}, {extra: 2}})
	seen := map[uint64]int{}
	for range 200 {
		seen[pickOnce(r, req, 1, true)]++
	}
	assert.Len(t, seen, 2, "tie between 1 and 2 is random: %v", seen)
	assert.Zero(t, seen[3])
}

func TestModes_Selection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mode   Mode
		states []state
		// allowed lists the workers the mode may pick over many draws; every
		// one must be seen.
		allowed []uint64
	}{
		{"least-loaded fewest in flight", ModeLeastLoaded, []state{{inflight: 2}, {inflight: 1}, {inflight: 3}}, []uint64{2}},
		{"least-loaded reported blocks break ties", ModeLeastLoaded, []state{{inflight: 1, reported: 9}, {inflight: 1, reported: 4}, {inflight: 2}}, []uint64{2}},
		{"least-loaded full ties are random", ModeLeastLoaded, []state{{inflight: 1}, {inflight: 1}, {inflight: 2}}, []uint64{1, 2}},
		{"power-of-two of two takes the less loaded", ModePowerOfTwo, []state{{inflight: 5}, {inflight: 1}}, []uint64{2}},
		{"power-of-two never takes the worst of three", ModePowerOfTwo, []state{{inflight: 1}, {inflight: 2}, {inflight: 3}}, []uint64{1, 2}},
		{"random covers all", ModeRandom, []state{{inflight: 9}, {}, {}}, []uint64{1, 2, 3}},
		{"kv prefers cache", ModeKV, []state{{}, {cached: 4}}, []uint64{2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Mode = tc.mode
			req := prompt("r", 4, 0)
			r := build(t, cfg, req, tc.states)
			seen := map[uint64]bool{}
			for range 300 {
				seen[pickOnce(r, req, 1, true)] = true
			}
			want := map[uint64]bool{}
			for _, id := range tc.allowed {
				want[id] = true
			}
			assert.Equal(t, want, seen)
		})
	}
}

func TestModes_RoundRobinCyclesInOrderAndSkipsBusy(t *testing.T) {
	t.Parallel()
	frac := 0.5
	cfg := DefaultConfig()
	cfg.Mode = ModeRoundRobin
	cfg.ActiveDecodeBlocksThreshold = &frac
	req := prompt("r", 1, 0)
	r := build(t, cfg, req, []state{{}, {}, {}})
	var got []uint64
	for range 6 {
		got = append(got, pickOnce(r, req, 1, true))
	}
	assert.Equal(t, []uint64{1, 2, 3, 1, 2, 3}, got)
	r.UpdateLoad(2, Load{RouterActiveBlocks: 900})
	got = got[:0]
	for range 4 {
		got = append(got, pickOnce(r, req, 1, true))
	}
	assert.NotContains(t, got, uint64(2))
	assert.ElementsMatch(t, []uint64{1, 3, 1, 3}, got)
}

// TestKV_SoftmaxFavoursCheaper checks the sampling distribution. With two
// workers the cheaper has weight 1 and the dearer exp(−1/T) after range
// normalisation, so P(cheaper) = 1/(1+exp(−1/T)).
func TestKV_SoftmaxFavoursCheaper(t *testing.T) {
	t.Parallel()
	tests := []struct {
		temp   float64
		lo, hi float64 // bounds on the cheaper worker's share
	}{
		{1, 0.69, 0.77},     // expected 0.731
		{0.2, 0.98, 1},      // expected 0.9933
		{100, 0.46, 0.5499}, // expected 0.5025
	}
	const n = 4000
	for _, tc := range tests {
		t.Run(fmt.Sprint("T=", tc.temp), func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Mode = ModeKV
			cfg.RouterTemperature = tc.temp
			cfg.Seed = 7
			req := prompt("r", 10, 0)
			r := build(t, cfg, req, []state{{cached: 6}, {}})
			wins := 0
			for range n {
				if pickOnce(r, req, 1, true) == 1 {
					wins++
				}
			}
			share := float64(wins) / n
			assert.GreaterOrEqual(t, share, tc.lo)
			assert.LessOrEqual(t, share, tc.hi)
		})
	}
}

func TestKV_SoftmaxEqualCostsAreUniform(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Mode = ModeKV
	cfg.RouterTemperature = 0.5
	req := prompt("r", 4, 0)
	r := build(t, cfg, req, []state{{}, {}, {}, {}})
	counts := map[uint64]int{}
	for range 4000 {
		counts[pickOnce(r, req, 1, true)]++
	}
	for id := uint64(1); id <= 4; id++ {
		assert.InDelta(t, 1000, counts[id], 150, "worker %d", id)
	}
}

// TestRouter_DeterministicWithSeed: the same seed gives the same 1,000
// choices, in every mode that draws random numbers.
func TestRouter_DeterministicWithSeed(t *testing.T) {
	t.Parallel()
	run := func(mode Mode, temp float64, seed uint64) []uint64 {
		cfg := DefaultConfig()
		cfg.Mode, cfg.RouterTemperature, cfg.Seed, cfg.BlockSize = mode, temp, seed, tbs
		r, err := New(cfg)
		require.NoError(t, err)
		for id := uint64(1); id <= 8; id++ {
			require.NoError(t, r.AddWorker(WorkerInfo{ID: id, Role: RoleAggregated}))
		}
		out := make([]uint64, 0, 1000)
		leases := make([]Lease, 1000)
		for i := range 1000 {
			req := prompt(fmt.Sprint(i), 1+i%5, uint32(i%7))
			w, l, err := r.RouteLease(req)
			require.NoError(t, err)
			out, leases[i] = append(out, w), l
			if i%3 == 0 && i >= 2 {
				r.FreeLease(leases[i-2])
			}
		}
		return out
	}
	for _, tc := range []struct {
		mode Mode
		temp float64
	}{{ModeRandom, 0}, {ModePowerOfTwo, 0}, {ModeLeastLoaded, 0}, {ModeKV, 0}, {ModeKV, 0.7}} {
		t.Run(fmt.Sprint(tc.mode, tc.temp), func(t *testing.T) {
			t.Parallel()
			a, b := run(tc.mode, tc.temp, 42), run(tc.mode, tc.temp, 42)
			assert.Equal(t, a, b)
			differs := false
			for seed := uint64(1); seed <= 3 && !differs; seed++ {
				differs = fmt.Sprint(run(tc.mode, tc.temp, 42+seed)) != fmt.Sprint(a)
			}
			assert.True(t, differs, "the seed must matter")
		})
	}
}
