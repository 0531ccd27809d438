package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/router"
)

// roomyDisagg is one prefill and one decode worker with room for the load
// and a modeled transfer: 64 KiB per token at 10 GB/s.
func roomyDisagg() Config {
	return Config{
		Disagg: true,
		Args: map[string]any{
			"speedup_ratio":                100,
			"kv_bytes_per_token":           65536,
			"kv_transfer_bandwidth":        10.0,
			"kv_transfer_abort_timeout_ms": 60000,
		},
	}
}

func TestDisagg_RoomyDecodeEveryRequestCompletes(t *testing.T) {
	c := start(t, roomyDisagg())
	const n, prompt = 12, 256
	results := runAll(c, repeat(Request{PromptTokens: prompt, MaxTokens: 10}, n))
	// tokens × bytes per token / (GB/s × 1e9) s, in ms.
	wantTransfer := float64(prompt) * 65536 / 10e9 * 1000
	ids := map[uint64]bool{}
	for _, r := range results {
		require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
		assert.Equal(t, 10, r.OutputTokens)
		assert.Equal(t, "prefill-0", r.PrefillWorker)
		assert.Equal(t, "decode-0", r.DecodeWorker)
		assert.NotZero(t, r.TransferID)
		ids[r.TransferID] = true
		assert.True(t, r.HoldStarted)
		assert.Equal(t, "transferred", r.HoldOutcome)
		assert.InDelta(t, wantTransfer, r.TransferMs, 1e-6)
		assert.GreaterOrEqual(t, r.HoldMs, r.TransferMs-1e-9, "float rounding aside")
		assert.Greater(t, r.TTFTMs, 0.0)
		assert.GreaterOrEqual(t, r.E2EMs, r.TTFTMs+r.TransferMs, "decode starts after the transfer")
		assert.GreaterOrEqual(t, r.DecodeWaitMs, 0.0)
	}
	assert.Len(t, ids, n, "transfer ids are unique")
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(n), s.Completed)
	assert.Equal(t, uint64(n), s.Holds)
	assert.Equal(t, uint64(n), s.HoldsReleased)
	assert.Zero(t, s.HoldsAborted)
	assert.Equal(t, uint64(n), s.TransfersStarted)
	assert.Equal(t, uint64(n), s.TransfersCompleted)
	assert.Positive(t, s.PeakHeldBlocks)
	for _, h := range c.Holds() {
		assert.Equal(t, "transferred", h.Outcome)
		assert.True(t, h.Claimed)
	}
}

// strandingDisagg saturates the decode side: one sequence slot, a small
// pool and long generations, while the prefill side holds KV with an abort
// timeout of abortMs.
func strandingDisagg(abortMs int) Config {
	return Config{
		Disagg: true,
		Args:   map[string]any{"speedup_ratio": 50, "kv_transfer_abort_timeout_ms": abortMs},
		Decode: PoolConfig{Args: map[string]any{"num_gpu_blocks": 48, "max_num_seqs": 1}},
	}
}

func TestDisagg_StrandedHoldsAbortAfterTimeout(t *testing.T) {
	// The abort timeout is long against the cluster's own wall-clock
	// overhead times the speedup (a handoff takes a few modeled ms per wall
	// ms), and short against the first request's 200-token generation
	// (well over 1 ms of modeled time per token), which the others wait for.
	const abortMs = 1000
	c := start(t, strandingDisagg(abortMs))
	const n = 6
	results := runAll(c, repeat(Request{PromptTokens: 64, MaxTokens: 200}, n))

	var completed, aborted int
	for _, r := range results {
		assert.True(t, r.HoldStarted)
		switch r.Outcome {
		case OutcomeCompleted:
			completed++
			assert.Equal(t, "transferred", r.HoldOutcome)
			assert.Less(t, r.HoldMs, float64(abortMs))
		case OutcomeAborted:
			aborted++
			assert.Equal(t, fmt.Sprintf("transfer %d aborted by source", r.TransferID), r.Error)
			assert.Equal(t, "aborted", r.HoldOutcome)
			// The hold lasts the timeout, within a pass or two of modeled
			// time.
			assert.InDelta(t, float64(abortMs), r.HoldMs, 50)
			assert.Zero(t, r.TransferMs, "an aborted hold was never transferred")
			// The decode started waiting when the hold started (causal
			// stamps) and was still waiting when the source gave up: it
			// reserved too late, or never did.
			assert.GreaterOrEqual(t, r.DecodeWaitMs, r.HoldMs-1e-6, "an aborted request's decode wait lasts at least until the abort")
		default:
			t.Fatalf("unexpected outcome %q: %s", r.Outcome, r.Error)
		}
	}
	assert.GreaterOrEqual(t, completed, 1)
	assert.GreaterOrEqual(t, aborted, n-2, "every decode that waited behind a 200-token generation was too late")

	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(aborted), s.HoldsAborted)
	assert.Equal(t, uint64(aborted), s.Aborted)
	assert.Equal(t, uint64(completed), s.HoldsReleased)
	assert.GreaterOrEqual(t, s.PeakHeldBlocks, 4*(n-1), "holds piled up on the prefill worker")
	assert.InDelta(t, float64(abortMs), s.HoldMsMax, 50)

	graph := c.HoldGraph()
	require.Len(t, graph, 1)
	assert.Equal(t, HoldEdge{PrefillWorker: "prefill-0", DecodeWorker: "decode-0", Holds: n,
		Transferred: uint64(completed), Aborted: uint64(aborted), TotalMs: graph[0].TotalMs, MaxMs: graph[0].MaxMs}, graph[0])
	holds := c.Holds()
	require.Len(t, holds, n)
	for i := 1; i < len(holds); i++ {
		assert.LessOrEqual(t, holds[i-1].StartMs, holds[i].StartMs, "sorted by start")
	}
	for _, h := range holds {
		if h.Outcome == "aborted" {
			assert.False(t, h.Claimed, "an aborted hold was never claimed")
		}
	}
}

func TestDisagg_CascadeRefusesPrefills(t *testing.T) {
	cfg := Config{
		Disagg: true,
		Args:   map[string]any{"speedup_ratio": 100, "kv_transfer_abort_timeout_ms": 3000},
		// The decode's one sequence slot is taken by each reservation
		// (reserve_takes_slot), so the holds behind a long generation wait
		// for it.
		Prefill:       PoolConfig{Args: map[string]any{"num_gpu_blocks": 32}},
		Decode:        PoolConfig{Args: map[string]any{"max_num_seqs": 1, "reserve_takes_slot": true}},
		RouterOptions: map[string]any{"busy_threshold": 0.5},
	}
	// Ten requests 100 modeled ms apart, each held before the next: the
	// first one's long generation occupies the decode's slot, the holds
	// behind it fill the prefill pool past its busy threshold, and the
	// router refuses the rest. On virtual time the arrivals land exactly there, whatever the
	// host is doing.
	const n = 10
	arr := make([]Arrival, n)
	for i := range arr {
		arr[i] = Arrival{AtMs: 100 * float64(i), Request: Request{PromptTokens: 64, MaxTokens: 400}}
	}
	run, err := RunVirtual(cfg, arr, VirtualOptions{})
	require.NoError(t, err)
	var refused int
	for _, r := range run.Results {
		if r.Outcome == OutcomeRejected {
			refused++
			assert.True(t, r.PrefillRejected)
			assert.Equal(t, "all prefill workers busy", r.Error)
			assert.False(t, r.HoldStarted)
		}
	}
	assert.Positive(t, refused, "a full prefill pool refuses new prefills")
	assert.Less(t, refused, n, "the first requests held before the pool filled")
	s := run.Stats
	assert.Equal(t, uint64(refused), s.PrefillRejections)
	assert.Equal(t, uint64(refused), s.Rejected)
	assert.Zero(t, s.HeldBlocks+s.ReservedBlocks+s.ActiveBlocks, "nothing left behind")
}

func TestDisagg_ForensicLogRecordsEveryTransition(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	cfg := roomyDisagg()
	cfg.Logger = slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	c := start(t, cfg)
	res := c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 3})
	require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
	drainAndCheck(t, c)

	want := []string{EventHoldStart, EventDecodeWait, EventDecodeReserved, EventTransferStart, EventHoldEnd}
	var got []string
	for _, ev := range c.Events() {
		got = append(got, ev.Name)
		assert.Equal(t, res.TransferID, ev.TransferID)
		assert.Equal(t, "prefill-0", ev.PrefillWorker)
		assert.Equal(t, "decode-0", ev.DecodeWorker)
	}
	assert.Equal(t, want, got)

	mu.Lock()
	defer mu.Unlock()
	dec := json.NewDecoder(&buf)
	var logged []string
	for dec.More() {
		var rec map[string]any
		require.NoError(t, dec.Decode(&rec))
		logged = append(logged, rec["msg"].(string))
		assert.Equal(t, float64(res.TransferID), rec["transfer_id"])
		assert.Contains(t, rec, "t_ms")
		assert.Contains(t, rec, "request_id")
		if rec["msg"] == EventHoldEnd {
			assert.Equal(t, "transferred", rec["outcome"])
			assert.InDelta(t, res.HoldMs, rec["duration_ms"], 1e-9)
		}
	}
	assert.Equal(t, want, logged)
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestDisagg_DecodeRejectionReleasesTheHold(t *testing.T) {
	cfg := roomyDisagg()
	cfg.Decode = PoolConfig{Args: map[string]any{"num_gpu_blocks": 2}}
	c := start(t, cfg)
	res := c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 4})
	assert.Equal(t, OutcomeRejected, res.Outcome)
	assert.Contains(t, res.Error, "num_gpu_blocks is 2")
	assert.False(t, res.PrefillRejected)
	assert.True(t, res.HoldStarted)
	assert.Equal(t, HoldCancelled, res.HoldOutcome, "the Result carries how the hold ended: given up, not by a deadline")
	assert.Zero(t, res.HoldMs, "an idle decode refuses at the instant the hold begins: no modeled time passes, however slow the host")
	assert.Equal(t, "decode-0", res.DecodeWorker)
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(1), s.HoldsCancelled, "the source gave the hold up")
	assert.Zero(t, s.HoldsAborted, "no abort deadline ended it")
	assert.Zero(t, s.TransfersStarted)
}

func TestDisagg_BusyDecodePoolRefusesNamingIt(t *testing.T) {
	cfg := Config{
		Disagg:        true,
		Args:          map[string]any{"speedup_ratio": 10, "kv_transfer_abort_timeout_ms": 600000},
		Prefill:       PoolConfig{Args: map[string]any{"num_gpu_blocks": 1024}},
		Decode:        PoolConfig{Args: map[string]any{"num_gpu_blocks": 16, "max_num_seqs": 1}},
		RouterOptions: map[string]any{"busy_threshold": 0.5},
	}
	c := start(t, cfg)
	// Each request charges the decode worker its 4 prompt blocks until it
	// ends; three long ones put 12 of 16 over the threshold of 8. The
	// first of them decodes for seconds of wall time at speedup 10, so a
	// loaded host that is slow to see the third hold start still probes
	// before the first ends (at speedup 100 it ended within ~0.1 s, and
	// a starved test saw 8 of 16 and no refusal).
	const n = 3
	long := make(chan Result, n)
	for range n {
		go func() { long <- c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 1000}) }()
	}
	waitFor(t, "the long requests to hold", func() bool { return c.Stats().Holds >= n })
	res := c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 4})
	assert.Equal(t, OutcomeRejected, res.Outcome)
	assert.Equal(t, "all decode workers busy", res.Error)
	assert.False(t, res.PrefillRejected, "the prefill pool had room")
	assert.False(t, res.HoldStarted)
	for range n {
		assert.Equal(t, OutcomeCompleted, (<-long).Outcome)
	}
	s := drainAndCheck(t, c)
	assert.Zero(t, s.PrefillRejections)
	assert.Equal(t, uint64(1), s.Rejected)
}

func TestRouteRefusal_NamesTheBusyPool(t *testing.T) {
	for _, tc := range []struct {
		err             error
		outcome, msg    string
		prefillRejected bool
	}{
		{fmt.Errorf("route: %w", &router.BusyError{Role: router.RolePrefill}), OutcomeRejected, "all prefill workers busy", true},
		{fmt.Errorf("route: %w", &router.BusyError{Role: router.RoleDecode}), OutcomeRejected, "all decode workers busy", false},
		{fmt.Errorf("route: %w", &router.BusyError{Role: router.RoleAggregated}), OutcomeRejected, "all workers busy", true},
		{fmt.Errorf("route: %w", router.ErrNoWorkers), OutcomeError, "route: no workers registered", false},
	} {
		r := routeRefusal(tc.err)
		assert.Equal(t, tc.outcome, r.Outcome)
		assert.Equal(t, tc.msg, r.Error)
		assert.Equal(t, tc.prefillRejected, r.PrefillRejected)
	}
}

// TestDisagg_CompatPrefillGeneratesOneToken: under dynamo_compat a vLLM
// prefill worker generates the max_tokens it is given, so the handoff asks
// it for one token, as Dynamo's frontend does: every hold is the prompt's
// blocks alone, and the decode worker still produces the whole answer.
func TestDisagg_CompatPrefillGeneratesOneToken(t *testing.T) {
	cfg := roomyDisagg()
	cfg.Args["dynamo_compat"] = true
	cfg.Args["block_size"] = 16
	c := start(t, cfg)
	const n, prompt = 4, 64
	for _, r := range runAll(c, repeat(Request{PromptTokens: prompt, MaxTokens: 10}, n)) {
		require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
		assert.Equal(t, 10, r.OutputTokens)
	}
	drainAndCheck(t, c)
	holds := c.Holds()
	require.Len(t, holds, n)
	for _, h := range holds {
		assert.Equal(t, prompt/16, h.Blocks, "a prefill that generated more would hold its tokens' blocks too")
	}
}
