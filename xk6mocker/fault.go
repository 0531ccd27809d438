package xk6mocker

import (
	"context"

	"github.com/kvstrand/mocker/cluster"
)

// A fault breaks every cluster of a run from outside its script, so that
// tests can check that the thresholds of the scripts users copy catch a
// broken cluster without a knob in the scripts themselves. Past its first
// After requests a cluster answers none the way it should: each new request
// ends "error" after refuseMs, as behind a cluster that lost its workers
// (Hang false), or gets no answer until its VU's work is stopped, as from a
// worker that froze (Hang). The requests the fault takes never reach the
// cluster, so it drains and keeps its invariants.
type fault struct {
	After uint64
	Hang  bool
}

// faultKey is the context key of withFault.
type faultKey struct{}

// withFault returns a copy of ctx that, given to harness.Run, breaks the
// run's clusters as f says. Only the package's tests call it.
func withFault(ctx context.Context, f fault) context.Context {
	return context.WithValue(ctx, faultKey{}, &f)
}

// faultFor is the fault ctx carries, or nil.
func faultFor(ctx context.Context) *fault {
	if ctx == nil {
		return nil
	}
	f, _ := ctx.Value(faultKey{}).(*fault)
	return f
}

// faulted reports whether the run's fault takes the request being made
// instead of the cluster.
func (e *entry) faulted() bool {
	return e.fault != nil && e.taken.Add(1) > e.fault.After
}

// refuseMs is how long, in modeled ms, a refused request takes to end: a
// client learns of a broken cluster after a round trip, not in no time,
// so a script that loops on errors moves through its scenario rather
// than spinning at one instant.
const refuseMs = 100

// faultResult is the outcome of a request the fault took; a hung request
// ends only with ctx. It may wait on the run's clock, so it runs on the
// VU's goroutine for a stepped cluster.
func (e *entry) faultResult(ctx context.Context) cluster.Result {
	if e.fault.Hang {
		<-ctx.Done()
		return cluster.Result{Outcome: cluster.OutcomeError, Error: "no answer: the test froze the cluster"}
	}
	_ = e.sleep(ctx, refuseMs)
	return cluster.Result{Outcome: cluster.OutcomeError, Error: "refused: the test broke the cluster"}
}

// deliverFault hands done the result of a request the fault took on a
// stepped cluster, as the cluster would: a refusal once its time has
// passed (the VU waits for it here), a hung request once ctx ends.
func (e *entry) deliverFault(ctx context.Context, done func(cluster.Result)) {
	if !e.fault.Hang {
		done(e.faultResult(ctx))
		return
	}
	go func() { done(e.faultResult(ctx)) }()
}
