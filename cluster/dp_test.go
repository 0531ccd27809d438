package cluster

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rankKey names one (worker, rank) pair of a result's prefill side.
func rankKey(r Result) string { return fmt.Sprintf("%s dp_rank %d", r.PrefillWorker, r.PrefillDPRank) }

// TestDP_SharedPrefixStaysOnOneRank: with dp_size 4 under kv routing,
// every request sharing a prefix goes to the same (worker, rank) pair as
// the first one, whose KV events indexed the prefix for that rank alone,
// while requests with prefixes of their own spread over the ranks.
func TestDP_SharedPrefixStaysOnOneRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"aggregated", Config{Engine: "vllm", Workers: 2, Router: "kv", Seed: 3,
			Args: map[string]any{"dp_size": 4, "num_gpu_blocks": 512}}},
		{"disagg", Config{Engine: "vllm", Disagg: true, Router: "kv", Seed: 3,
			Prefill: PoolConfig{Workers: 2, Args: map[string]any{"dp_size": 4, "num_gpu_blocks": 512}},
			Decode:  PoolConfig{Workers: 1, Args: map[string]any{"dp_size": 2}}}},
		{"sglang-disagg", Config{Engine: "sglang", Disagg: true, Router: "kv", Seed: 3,
			Prefill: PoolConfig{Workers: 2, Args: map[string]any{"dp_size": 4, "num_gpu_blocks": 512}},
			Decode:  PoolConfig{Workers: 1, Args: map[string]any{"dp_size": 2}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// One request at a time, each after the last has ended: the
			// ranks' loads are equal at every decision, so only the index
			// tells them apart.
			// Eight prompts of their own come first and warm every rank
			// alike, then twelve share a prefix.
			var arr []Arrival
			for i := range 8 {
				arr = append(arr, Arrival{AtMs: float64(i) * 500, Request: Request{
					PromptTokens: 640, PrefixTokens: 512, Prefix: fmt.Sprintf("own-%d", i), MaxTokens: 4}})
			}
			for i := range 12 {
				arr = append(arr, Arrival{AtMs: 4000 + float64(i)*500, Request: Request{
					PromptTokens: 640, PrefixTokens: 512, Prefix: "shared", MaxTokens: 4}})
			}
			run, err := RunVirtual(tc.cfg, arr, VirtualOptions{})
			require.NoError(t, err)
			spread := map[string]bool{}
			for _, r := range run.Results[:8] {
				require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
				spread[rankKey(r)] = true
			}
			assert.Len(t, spread, 8, "prompts of their own go to every (worker, rank) pair once, the smaller index winning ties: %v", spread)
			first := run.Results[8]
			require.Equal(t, OutcomeCompleted, first.Outcome, first.Error)
			// The seed puts the prefix on a rank other than 0, so a router
			// that merged a worker's ranks would send the others elsewhere.
			require.NotZero(t, first.PrefillDPRank, "seed 3 places the shared prefix on rank %d", first.PrefillDPRank)
			for i, r := range run.Results[8:] {
				require.Equal(t, OutcomeCompleted, r.Outcome, "request %d: %s", i, r.Error)
				assert.Equal(t, rankKey(first), rankKey(r), "request %d follows the shared prefix", i)
				if i > 0 {
					assert.Equal(t, 512, r.CachedTokens, "request %d hits the rank's cache", i)
				}
			}

			ranks := map[string][]int{}
			for _, w := range run.Stats.Workers {
				ranks[w.Name] = append(ranks[w.Name], w.DPRank)
			}
			pool := "worker-"
			if tc.cfg.Disagg {
				pool = "prefill-"
				assert.Equal(t, []int{0, 1}, ranks["decode-0"])
			}
			assert.Equal(t, []int{0, 1, 2, 3}, ranks[pool+"0"])
			assert.Equal(t, []int{0, 1, 2, 3}, ranks[pool+"1"])
			assert.Len(t, run.Stats.Workers, len(ranks[pool+"0"])+len(ranks[pool+"1"])+len(ranks["decode-0"]))
			assert.NoError(t, invariantState{s: run.Stats, settled: true}.check())
		})
	}
}

// TestDP_RanksHaveSeparatePools: a rank whose pool is full of held KV
// (a slow transfer) does not refuse a prefill on another rank of the same
// worker. With dp_size 1 the same load is the cascade: the second prompt
// finds the worker busy.
func TestDP_RanksHaveSeparatePools(t *testing.T) {
	for _, tc := range []struct {
		dp       int
		rejected bool
	}{{1, true}, {2, false}} {
		t.Run(fmt.Sprintf("dp_size %d", tc.dp), func(t *testing.T) {
			t.Parallel()
			cfg := Config{Engine: "vllm", Disagg: true, Router: "kv", Seed: 1,
				// 600 tokens × 128 KiB at 0.01 GB/s: a transfer of about 7.9
				// modeled seconds, during which 38 of 40 blocks stay held.
				Args:    map[string]any{"kv_bytes_per_token": 131072, "kv_transfer_bandwidth": 0.01},
				Prefill: PoolConfig{Workers: 1, Args: map[string]any{"dp_size": tc.dp, "num_gpu_blocks": 40}},
				Decode:  PoolConfig{Workers: 1},
				// Held blocks count as load, so the full rank is busy.
				RouterOptions: map[string]any{"busy_threshold": 0.5},
			}
			arr := []Arrival{
				{AtMs: 0, Request: Request{PromptTokens: 600, MaxTokens: 2, Prefix: "a", PrefixTokens: 600}},
				{AtMs: 100, Request: Request{PromptTokens: 600, MaxTokens: 2, Prefix: "b", PrefixTokens: 600}},
			}
			run, err := RunVirtual(cfg, arr, VirtualOptions{})
			require.NoError(t, err)
			a, b := run.Results[0], run.Results[1]
			require.Equal(t, OutcomeCompleted, a.Outcome, a.Error)
			require.Greater(t, a.HoldMs, 1000.0, "the first hold lasts its slow transfer")
			if tc.rejected {
				assert.Equal(t, OutcomeRejected, b.Outcome)
				assert.True(t, b.PrefillRejected, "the one rank's held KV refuses the next prefill")
				return
			}
			require.Equal(t, OutcomeCompleted, b.Outcome, b.Error)
			assert.NotEqual(t, a.PrefillDPRank, b.PrefillDPRank, "the second prompt goes to the other rank")
			assert.Less(t, b.TTFTMs, a.HoldMs/10, "its prefill does not wait for the first rank's hold")
			assert.True(t, b.HoldStarted)
			assert.Equal(t, a.PrefillWorker, b.PrefillWorker, "both ranks are the one worker")
			assert.NoError(t, invariantState{s: run.Stats, settled: true}.check())
		})
	}
}

// TestDP_InvariantsNameTheRank: block conservation is checked per rank,
// and a violation names the worker and its rank; a worker with one rank is
// named alone, as before.
func TestDP_InvariantsNameTheRank(t *testing.T) {
	ws := func(name string, ranks int) []WorkerStats {
		var out []WorkerStats
		for r := range ranks {
			out = append(out, WorkerStats{Name: name, DPRank: r, TotalBlocks: 10, FreeBlocks: 10})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		workers []WorkerStats
		broken  int
		want    string
	}{
		{"rank 2 of 4", append(ws("prefill-0", 4), ws("decode-0", 1)...), 2, "prefill-0 dp_rank 2: active 0 + inactive 0 + free 9 != total 10 blocks"},
		{"rank 0 of 4", ws("prefill-0", 4), 0, "prefill-0 dp_rank 0: active 0"},
		{"one rank", append(ws("prefill-0", 4), ws("decode-0", 1)...), 4, "decode-0: active 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := invariantState{s: Stats{Workers: tc.workers}, settled: true}
			require.NoError(t, st.check())
			st.s.Workers[tc.broken].FreeBlocks--
			err := st.check()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestDP_LiveClusterDrainsEveryRank: a paced cluster with data-parallel
// ranks on both sides runs requests through Generate and drains, with
// docs/design.md §6 checked per rank, and its results name the ranks.
func TestDP_LiveClusterDrainsEveryRank(t *testing.T) {
	c := start(t, Config{Engine: "vllm", Disagg: true, Router: "round-robin",
		Args:    map[string]any{"speedup_ratio": 100},
		Prefill: PoolConfig{Workers: 1, Args: map[string]any{"dp_size": 3}},
		Decode:  PoolConfig{Workers: 1, Args: map[string]any{"dp_size": 2}}})
	res := runAll(c, repeat(Request{PromptTokens: 64, MaxTokens: 3}, 12))
	prefill, decode := map[int]int{}, map[int]int{}
	for _, r := range res {
		require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
		prefill[r.PrefillDPRank]++
		decode[r.DecodeDPRank]++
	}
	assert.Equal(t, map[int]int{0: 4, 1: 4, 2: 4}, prefill, "round-robin over the prefill ranks")
	assert.Equal(t, map[int]int{0: 6, 1: 6}, decode, "and over the decode ranks")
	s := drainAndCheck(t, c)
	require.Len(t, s.Workers, 5)
	addr := s.Workers[0].TransferAddr
	assert.NotEmpty(t, addr)
	for _, w := range s.Workers[:3] {
		assert.Equal(t, "prefill-0", w.Name)
		assert.Equal(t, addr, w.TransferAddr, "the ranks share their worker's transfer server")
		assert.Positive(t, w.Passes, "rank %d ran its own scheduler", w.DPRank)
	}
	for _, h := range c.Holds() {
		assert.Equal(t, "prefill-0", h.PrefillWorker)
		assert.Contains(t, []int{0, 1, 2}, h.PrefillDPRank)
		assert.Contains(t, []int{0, 1}, h.DecodeDPRank)
	}
}

// TestDP_DeterministicAcrossRuns: a saturated burst through data-parallel
// ranks on both sides gives byte-identical results and event logs from run
// to run, for each lifecycle, and leaves every rank consistent and empty.
func TestDP_DeterministicAcrossRuns(t *testing.T) {
	for _, engine := range []string{"vllm", "sglang"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			cfg := func() Config {
				c := saturatedShape(engine, 9, nil)
				c.Prefill.Args["dp_size"] = 4
				c.Decode.Args["dp_size"] = 2
				return c
			}
			arr := burst(5, 150, 300)
			a, err := RunVirtual(cfg(), arr, VirtualOptions{EventLog: true})
			require.NoError(t, err)
			b, err := RunVirtual(cfg(), arr, VirtualOptions{EventLog: true})
			require.NoError(t, err)
			assert.Equal(t, runJSON(t, a), runJSON(t, b), "same config, seed and arrivals: byte-identical")

			used := map[string]bool{}
			for _, r := range a.Results {
				if r.HoldStarted {
					used[rankKey(r)] = true
				}
			}
			assert.Greater(t, len(used), 4, "the burst holds KV on ranks of both prefill workers: %v", used)
			require.Len(t, a.Stats.Workers, 2*4+2)
			assert.Equal(t, uint64(len(arr)), a.Stats.Requests)
			assert.Zero(t, a.Stats.Errored)
			assert.NoError(t, invariantState{s: a.Stats, settled: true}.check())
		})
	}
}

// TestDP_SeriesLabelsRanks: the history names each rank's column by its
// worker and rank, and a worker with one rank by its name alone.
func TestDP_SeriesLabelsRanks(t *testing.T) {
	run, err := RunVirtual(Config{Disagg: true,
		Prefill: PoolConfig{Args: map[string]any{"dp_size": 2}}},
		[]Arrival{{Request: Request{PromptTokens: 32, MaxTokens: 2}}}, VirtualOptions{})
	require.NoError(t, err)
	s := run.Series
	assert.Equal(t, []string{"prefill-0", "prefill-0", "decode-0"}, s.Workers)
	assert.Equal(t, []int{0, 1, 0}, s.DPRanks)
	var labels []string
	for i := range s.Workers {
		labels = append(labels, s.Label(i))
	}
	assert.Equal(t, []string{"prefill-0 dp_rank 0", "prefill-0 dp_rank 1", "decode-0"}, labels)
}
