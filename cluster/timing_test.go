package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// invarianceCase is one disaggregated setup run at several speedups.
type invarianceCase struct {
	name       string
	engine     string
	optimistic bool
	bandwidth  float64 // GB/s; 0 leaves the transfer free
}

func (ic invarianceCase) config(speedup float64) Config {
	args := map[string]any{
		"speedup_ratio": speedup,
		// Short against any host latency times a high speedup: a handoff
		// stamped in wall time would abort here.
		"kv_transfer_abort_timeout_ms": 100,
	}
	if ic.bandwidth > 0 {
		args["kv_bytes_per_token"] = 65536
		args["kv_transfer_bandwidth"] = ic.bandwidth
	}
	if ic.engine == "sglang" {
		args["sglang"] = map[string]any{"optimistic_prefill": ic.optimistic}
	}
	return Config{Disagg: true, Engine: ic.engine, Args: args,
		Decode: PoolConfig{Args: map[string]any{"max_num_seqs": 4}}}
}

// runSequential sends reqs one after the other, as a single VU would.
func runSequential(c *Cluster, reqs []Request) []Result {
	out := make([]Result, len(reqs))
	for i, r := range reqs {
		out[i] = c.Generate(context.Background(), r)
	}
	return out
}

// TestDisagg_ModeledTimesIndependentOfSpeedup: every time a Result reports
// is modeled, so the same sequential workload on an idle cluster reports the
// same pin, transfer, TTFT and end-to-end times at every speedup: the
// latency of goroutines and sockets between the two workers must not leak
// into them, nor turn a short abort timeout into aborts at a high speedup.
func TestDisagg_ModeledTimesIndependentOfSpeedup(t *testing.T) {
	const prompt = 256
	cases := []invarianceCase{
		{name: "vllm free transfer", engine: "vllm"},
		{name: "vllm 10 GB/s", engine: "vllm", bandwidth: 10},
		{name: "sglang destination-first free transfer", engine: "sglang"},
		{name: "sglang destination-first 10 GB/s", engine: "sglang", bandwidth: 10},
		{name: "sglang optimistic 10 GB/s", engine: "sglang", optimistic: true, bandwidth: 10},
	}
	speedups := []float64{1, 10, 100, 1000}
	reqs := repeat(Request{PromptTokens: prompt, MaxTokens: 6}, 3)
	for _, ic := range cases {
		t.Run(ic.name, func(t *testing.T) {
			// tokens × bytes per token / (GB/s × 1e9) s, in ms.
			wantTransfer := float64(prompt) * 65536 / (ic.bandwidth * 1e9) * 1000
			if ic.bandwidth == 0 {
				wantTransfer = 0
			}
			var base []Result
			for _, sp := range speedups {
				c := start(t, ic.config(sp))
				got := runSequential(c, reqs)
				s := drainAndCheck(t, c)
				assert.Zero(t, s.Aborted, "speedup %v: no handoff on an idle cluster outlasts a 100 ms abort timeout", sp)
				for i, r := range got {
					require.Equal(t, OutcomeCompleted, r.Outcome, "speedup %v request %d: %s", sp, i, r.Error)
					assert.InDelta(t, wantTransfer, r.TransferMs, 1e-6)
					assert.InDelta(t, r.DecodeWaitMs+r.TransferMs, r.HoldMs, 1e-6,
						"speedup %v request %d: on an idle cluster the hold lasts the decode's wait and the transfer", sp, i)
					assert.Zero(t, r.DecodeWaitMs, "an idle decode reserves at once")
				}
				if base == nil {
					base = got
					continue
				}
				for i := range got {
					b, r := base[i], got[i]
					for _, m := range []struct {
						what       string
						want, have float64
					}{
						{"pin_ms", b.HoldMs, r.HoldMs},
						{"transfer_ms", b.TransferMs, r.TransferMs},
						{"ttft_ms", b.TTFTMs, r.TTFTMs},
						{"e2e_ms", b.E2EMs, r.E2EMs},
						{"itl_ms", b.ITLMs, r.ITLMs},
					} {
						assert.InDelta(t, m.want, m.have, 1e-6, "request %d %s at speedup %v vs 1", i, m.what, sp)
					}
				}
			}
		})
	}
}

// TestDisagg_NoAbortOnIdleClusterAtHighSpeedup: at 500× a 100 ms abort
// timeout is 0.2 ms of wall time, less than a loopback handoff takes; the
// handoff's steps are stamped from the events that caused them, so none
// of it counts.
func TestDisagg_NoAbortOnIdleClusterAtHighSpeedup(t *testing.T) {
	for _, engine := range []string{"vllm", "sglang"} {
		t.Run(engine, func(t *testing.T) {
			ic := invarianceCase{engine: engine, optimistic: engine == "sglang"}
			c := start(t, ic.config(500))
			for i, r := range runSequential(c, repeat(Request{PromptTokens: 512, MaxTokens: 4}, 10)) {
				require.Equal(t, OutcomeCompleted, r.Outcome, "request %d: %s", i, r.Error)
				assert.Equal(t, "transferred", r.HoldOutcome)
				assert.Zero(t, r.HoldMs, "a free transfer to an idle decode holds for no modeled time")
			}
			s := drainAndCheck(t, c)
			assert.Zero(t, s.HoldsAborted)
		})
	}
}

// TestSGLang_BootstrapTimeoutWithdrawsReservation: a destination-first
// request whose decode never finds room waits in the prefill's bootstrap
// queue holding nothing, and ends "rejected" once
// handoff_session_timeout_ms of modeled time has passed, its pending
// reservation withdrawn, nothing left behind.
func TestSGLang_BootstrapTimeoutWithdrawsReservation(t *testing.T) {
	const session = 300
	c := start(t, Config{Disagg: true, Engine: "sglang",
		Args: map[string]any{"speedup_ratio": 100, "handoff_session_timeout_ms": session},
		// A reservation holds the decode's one slot (reserve_takes_slot),
		// so the second request cannot reserve while the first decodes.
		Decode: PoolConfig{Args: map[string]any{"max_num_seqs": 1, "reserve_takes_slot": true}}})

	// The first request takes the decode's one slot for far longer than
	// the session timeout (thousands of decode steps of at least 1 ms).
	first := make(chan Result, 1)
	go func() { first <- c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 3000}) }()
	waitFor(t, "the first request to decode", func() bool {
		for _, w := range c.Stats().Workers {
			if w.Name == "decode-0" && w.Running == 1 {
				return true
			}
		}
		return false
	})
	before := c.Now()
	r := c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 4})
	after := c.Now()
	assert.Equal(t, OutcomeRejected, r.Outcome)
	assert.Contains(t, r.Error, "handoff timeout")
	assert.Contains(t, r.Error, fmt.Sprintf("handoff_session_timeout_ms %d", session))
	assert.False(t, r.HoldStarted, "the prefill never ran")
	assert.False(t, r.PrefillRejected)
	// The timeout fires at its arrival + session, the arrival at or after
	// before: the difference is the session or more, up to the rounding of
	// (before + session) - before, which a wall-paced before makes any value.
	assert.GreaterOrEqual(t, after-before, float64(session)*(1-1e-12), "it waited the session timeout of modeled time")
	st := c.Stats()
	assert.Equal(t, 1, st.Workers[1].Running, "the first request still decodes")
	assert.Zero(t, st.Workers[1].Waiting, "no reservation request left queued on the decode")

	f := <-first
	require.Equal(t, OutcomeCompleted, f.Outcome, f.Error)
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(1), s.Rejected)
	assert.Equal(t, uint64(1), s.Holds)
}

// TestResult_Truncated: a completion cut short by a length limit is still
// "completed" but says so, naming the limit.
func TestResult_Truncated(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"max_model_len aggregated", Config{Workers: 1, Args: map[string]any{"speedup_ratio": 1000, "max_model_len": 80}},
			"reached worker-0's max_model_len 80"},
		{"max_model_len disaggregated", Config{Disagg: true, Args: map[string]any{"speedup_ratio": 1000, "max_model_len": 80}},
			"reached decode-0's max_model_len 80"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t, tc.cfg)
			r := c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 50})
			require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
			assert.True(t, r.Truncated)
			assert.Less(t, r.OutputTokens, 50)
			assert.Contains(t, r.Error, tc.want)
			assert.True(t, strings.HasPrefix(r.Error, fmt.Sprintf("output truncated at %d tokens", r.OutputTokens)), r.Error)

			full := c.Generate(context.Background(), Request{PromptTokens: 8, MaxTokens: 4})
			require.Equal(t, OutcomeCompleted, full.Outcome)
			assert.False(t, full.Truncated)
			assert.Empty(t, full.Error)
			drainAndCheck(t, c)
		})
	}
}
