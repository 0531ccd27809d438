package cluster

import "github.com/kvstrand/mocker/engine"

// WorkerHandle is how the cluster's loop reaches one worker: the seam
// between the loop (routing, the handoff machines, forensics, stats) and
// where a worker runs. The loop hands a worker typed inputs with Apply and
// reads its occupancy with Metrics; the worker's outputs and the replies to
// its inputs come back to the loop as engine.Outputs and
// engine.InputResults, on the loop's goroutine. The in-process handle runs
// the worker on the loop's own event queue; a transport to workers in other
// processes implements the same interface and posts what its workers send
// into the loop.
type WorkerHandle interface {
	// Apply hands in to the worker at the loop's modeled now. The slices a
	// Submit or Reserve carries (the prompt's tokens and hashes) stay
	// unchanged only until the loop's clock passes the end of their
	// request, when the loop reuses the hashes' storage: a handle that
	// reads them later must copy them.
	Apply(in engine.Input)
	// Metrics is the worker's occupancy now (for a remote worker: as last
	// reported).
	Metrics() engine.Metrics
}

// localWorker is a worker on the loop's own discrete-event queue.
type localWorker struct {
	v   *engine.Virtual
	idx int
	w   *engine.Worker
}

func (l *localWorker) Apply(in engine.Input) { l.v.Schedule(l.v.Now(), l.idx, in) }

func (l *localWorker) Metrics() engine.Metrics { return l.w.Metrics() }
