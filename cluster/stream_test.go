package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// streamOf reads arrs as a StreamSource keyed by index, copying each
// prompt into one of two buffers in turn, as a trace reader that reuses
// its storage does.
func streamOf(arrs []Arrival) StreamSource {
	var bufs [2][]uint32
	i := 0
	return func() (StreamArrival, bool) {
		if i >= len(arrs) {
			return StreamArrival{}, false
		}
		a := arrs[i]
		if a.Request.Tokens != nil {
			b := &bufs[i%2]
			*b = append((*b)[:0], a.Request.Tokens...)
			a.Request.Tokens = *b
		}
		i++
		return StreamArrival{Arrival: a, Key: i - 1}, true
	}
}

func TestRunStream_SameResultsAsRunVirtual(t *testing.T) {
	t.Parallel()
	// The cascade: held KV fills a small prefill pool past its busy
	// threshold, so requests are refused and holds abort.
	cascade := Config{Disagg: true, Seed: 2,
		Args:          map[string]any{"kv_transfer_abort_timeout_ms": 300},
		Prefill:       PoolConfig{Args: map[string]any{"num_gpu_blocks": 256}},
		Decode:        PoolConfig{Args: map[string]any{"max_num_seqs": 2, "reserve_takes_slot": true}},
		RouterOptions: map[string]any{"busy_threshold": 0.5}}
	for _, tc := range []struct {
		name string
		cfg  Config
		gap  float64
	}{{"steady", saturatedDisagg(), 12}, {"saturated", saturatedDisagg(), 2}, {"cascade", cascade, 5}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 400
			arr := make([]Arrival, n)
			for i := range arr {
				req := Request{PromptTokens: 600, Prefix: []string{"a", "b", "c"}[i%3], PrefixTokens: 300, MaxTokens: 40 + i%7}
				arr[i] = Arrival{AtMs: float64(i) * tc.gap, Request: Request{Tokens: promptTokens(req, 3, uint64(i+1)), MaxTokens: req.MaxTokens}}
			}
			arr[5].Request.MaxTokens = -1 // an invalid one ends at once, in both
			want, err := RunVirtual(tc.cfg, arr, VirtualOptions{})
			require.NoError(t, err)
			got := make([]Result, n)
			seen := 0
			run, err := RunStream(tc.cfg, streamOf(arr), StreamOptions{OnResult: func(key int, _ float64, res Result) (StreamArrival, bool) {
				got[key] = res
				seen++
				return StreamArrival{}, false
			}})
			require.NoError(t, err)
			assert.Equal(t, n, seen, "one result per arrival")
			assert.Equal(t, want.Results, got)
			assert.Equal(t, want.Stats, run.Stats)
			assert.Equal(t, want.Series, run.Series)
			if tc.name == "cascade" {
				assert.Positive(t, run.Stats.Rejected, "the cascade refuses prefills")
				assert.Positive(t, run.Stats.HoldsAborted, "and aborts holds")
			}
		})
	}
}

func TestRunStream_FollowUpArrivesAfterItsTurnEnded(t *testing.T) {
	t.Parallel()
	// Three sessions of four turns each; a turn's follow-up is due 50 ms
	// after it ends.
	const sessions, turns, delay = 3, 4, 50.0
	arr := make([]Arrival, sessions)
	for i := range arr {
		arr[i] = Arrival{AtMs: float64(i), Request: Request{PromptTokens: 200, MaxTokens: 30}}
	}
	type turn struct{ arrive, end float64 }
	log := map[int][]turn{}
	arrivedAt := map[int]float64{0: 0, 1: 1, 2: 2}
	run, err := RunStream(saturatedDisagg(), streamOf(arr), StreamOptions{OnResult: func(key int, now float64, res Result) (StreamArrival, bool) {
		assert.Equal(t, OutcomeCompleted, res.Outcome, res.Error) // not require: this runs on the loop
		s := key % sessions
		at := arrivedAt[key]
		assert.InDelta(t, at+res.E2EMs, now, 1e-6, "the result comes at the instant its request ended")
		log[s] = append(log[s], turn{at, now})
		if len(log[s]) == turns {
			return StreamArrival{}, false
		}
		k := sessions*len(log[s]) + s // turn t of session s has key sessions×t + s
		arrivedAt[k] = now + delay
		return StreamArrival{Arrival: Arrival{AtMs: now + delay, Request: Request{PromptTokens: 200, MaxTokens: 30}}, Key: k}, true
	}})
	require.NoError(t, err)
	assert.Equal(t, uint64(sessions*turns), run.Stats.Completed)
	for s, ts := range log {
		require.Len(t, ts, turns, "session %d", s)
		for i := 1; i < len(ts); i++ {
			assert.InDelta(t, ts[i-1].end+delay, ts[i].arrive, 1e-9, "session %d turn %d starts its delay after the turn before ended", s, i)
		}
	}
}

func TestRunStream_EmptySourceEnds(t *testing.T) {
	t.Parallel()
	run, err := RunStream(saturatedDisagg(), func() (StreamArrival, bool) { return StreamArrival{}, false },
		StreamOptions{OnResult: func(int, float64, Result) (StreamArrival, bool) { return StreamArrival{}, false }})
	require.NoError(t, err)
	assert.Zero(t, run.Stats.Requests)
}
