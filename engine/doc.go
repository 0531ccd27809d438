// Package engine is the simulation core of mocker: mock LLM workers whose
// schedulers and KV pools behave like vLLM's, with exact block accounting.
//
// # A driven core
//
// A Worker never starts a goroutine, reads a clock or does I/O. The caller
// hands it inputs (Submit, ReleaseHeld, Cancel), each with the modeled time
// `now`, calls Step(now) to run a forward pass, and asks NextWake when the
// worker next needs attention. Step returns an Output: the tokens, the
// completions, rejections, lifecycle events and KV events of the pass, its
// modeled duration and the worker's metrics after it. Everything in it is
// stamped in modeled time; tokens carry the end of the pass that produced
// them, which is also the worker's next wake-up. When NextWake reports
// nothing runnable the driver parks until the next input: a worker whose
// only state is held KV does no work at all.
//
// Two drivers wrap the core. Virtual runs any number of workers on a
// discrete-event queue with a virtual clock: the same inputs and seeds give
// byte-identical outputs, and a run costs only the computation. Live runs
// one worker on a goroutine against the wall clock.
//
// # Modeled time and wall time
//
// All times are modeled milliseconds on the engine's timeline: pass lengths
// come from a perf.Model (decode divided by decode_speedup_ratio and floored
// at 1 ms), and nothing the core reports is scaled by speedup_ratio. Only
// the Live driver uses speedup_ratio, to turn a modeled instant into a wall
// instant (modeled / speedup) and back (wall elapsed × speedup). Latency
// thresholds therefore hold whatever the speedup.
//
// # Two views of occupancy
//
// The capacity view counts every allocated block, held ones included; it is
// what admission and preemption use, since a held block occupies memory as
// surely as a running one. The router-facing view (Metrics.RouterActiveBlocks)
// leaves out blocks referenced only by holds unless
// Args.RouterLoadIncludesHeld is set. Always ActiveBlocks + InactiveBlocks +
// FreeBlocks == TotalBlocks.
//
// # The Hold policy
//
// A request submitted with Hold is the source side of a disaggregated
// handoff. When it finishes (after its single token on a prefill worker) its
// running slot is freed but its blocks stay allocated: they fill the pool,
// count against admission and can make later prefills wait or be rejected.
// An EventHoldStarted marks the moment; ReleaseHeld ends the hold with an
// Outcome (Transferred or Aborted), emits EventHoldReleased with the hold's
// duration, and returns the blocks to the inactive pool where they still
// serve prefix hits. ReleaseHeld is idempotent. Requests submitted with
// Release never hold.
package engine
