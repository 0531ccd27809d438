package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// shortAborts is metrics.js's cluster: two prefill workers, one decode
// slot and an abort timeout of abortMs modeled ms, so decodes keep
// arriving around the moment their holds abort.
func shortAborts(engine string, abortMs int) Config {
	return Config{
		Disagg: true,
		Engine: engine,
		Args: map[string]any{"speedup_ratio": 20, "kv_transfer_abort_timeout_ms": abortMs,
			"kv_bytes_per_token": 131072, "kv_transfer_bandwidth": 25},
		Prefill: PoolConfig{Workers: 2, Args: map[string]any{"num_gpu_blocks": 512}},
		Decode:  PoolConfig{Args: map[string]any{"max_num_seqs": 1}},
	}
}

func TestResult_AbortedTransferCarriesHoldEnd(t *testing.T) {
	for _, abortMs := range []int{5, 40, 150} {
		t.Run(fmt.Sprintf("abort_%dms", abortMs), func(t *testing.T) {
			c := start(t, shortAborts("vllm", abortMs))
			for _, r := range runAll(c, repeat(Request{PromptTokens: 512, MaxTokens: 24}, 40)) {
				switch r.Outcome {
				case OutcomeCompleted:
					assert.Equal(t, "transferred", r.HoldOutcome)
					assert.Positive(t, r.HoldMs)
				case OutcomeAborted:
					assert.Equal(t, "aborted", r.HoldOutcome, "an aborted transfer reports how its hold ended")
					assert.InDelta(t, float64(abortMs), r.HoldMs, 50, "and how long it lasted")
				default:
					t.Errorf("unexpected outcome %q: %s", r.Outcome, r.Error)
				}
			}
			drainAndCheck(t, c)
		})
	}
}

// TestTransfers_AccountedUnderShortAbortsAndCancels runs many requests
// whose decodes reach the prefill around their abort deadlines, some
// cancelled by their callers at random moments (before, during or after
// the transfer), and checks after the drain that every transfer started
// is accounted as completed or aborted.
func TestTransfers_AccountedUnderShortAbortsAndCancels(t *testing.T) {
	for _, engine := range []string{"vllm", "sglang"} {
		for _, abortMs := range []int{5, 40} {
			t.Run(fmt.Sprintf("%s/abort_%dms", engine, abortMs), func(t *testing.T) {
				c := start(t, shortAborts(engine, abortMs))
				rng := rand.New(rand.NewPCG(uint64(abortMs), 1))
				const n = 60
				var wg sync.WaitGroup
				for i := range n {
					ctx, cancel := context.WithCancel(context.Background())
					if i%3 == 0 {
						// Wall-clock jitter only picks when the cancel lands.
						time.AfterFunc(time.Duration(rng.IntN(4000))*time.Microsecond, cancel)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer cancel()
						r := c.Generate(ctx, Request{PromptTokens: 256, MaxTokens: 8})
						if r.HoldStarted && r.Outcome != OutcomeError {
							assert.NotEmpty(t, r.HoldOutcome, "request ended %s with its hold's end unknown", r.Outcome)
						}
					}()
				}
				wg.Wait()
				s := drainAndCheck(t, c)
				assert.Equal(t, s.TransfersStarted, s.TransfersCompleted+s.TransfersAborted)
				assert.Equal(t, s.Holds, s.HoldsReleased+s.HoldsAborted+s.HoldsCancelled)
			})
		}
	}
}

// TestCheckInvariants_ConsistentWhileRunning checks the invariants over and
// over while holds start and end: each check must see the counters, the
// open holds and the applied-outputs condition at one instant, or a hold
// applied between two reads looks like a leak.
func TestCheckInvariants_ConsistentWhileRunning(t *testing.T) {
	c := start(t, shortAborts("vllm", 40))
	done := make(chan struct{})
	go func() {
		defer close(done)
		runAll(c, repeat(Request{PromptTokens: 256, MaxTokens: 8}, 120))
	}()
	checks, failures := 0, 0
	var first error
	for running := true; running; checks++ {
		select {
		case <-done:
			running = false
		default:
		}
		if err := c.CheckInvariants(); err != nil {
			failures++
			if first == nil {
				first = err
			}
		}
	}
	assert.Zero(t, failures, "%d of %d checks failed while running, e.g. %v", failures, checks, first)
	drainAndCheck(t, c)
}
