package cluster

import (
	"fmt"

	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/router"
)

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
	// Apply hands in to the worker at the loop's modeled now. A *Submit
	// or *Reserve, and the slices it carries (the prompt's tokens and
	// hashes), stay unchanged only until the loop's clock passes the end
	// of their request, when the loop reuses their storage: a handle that
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

// kvView is an in-process worker's prefix cache as the router reads it:
// the worker's engine.KVView, told whether the loop has delivered the
// worker's last pass yet.
type kvView struct {
	v    *engine.Virtual
	idx  int
	view engine.KVView
}

func (k kvView) Depth(_ []kv.LocalHash, seqs []kv.SeqHash) int {
	return k.view.Depth(seqs, k.v.InFlight(k.idx))
}

func (k kvView) Blocks() int { return k.view.Blocks(k.v.InFlight(k.idx)) }

// viewKV has the router read in-process worker n (the loop's worker idx)
// through its KV view, when it offers one and the router's index is fed by
// KV events: the router then gets the answers the index would give without
// the per-block work of replaying every event into it. The GPU pool's
// events no longer go to the router, so the worker omits them (unless a
// test taps them); its Outputs reach the loop as they did with them, each
// with the load report that goes with it. The events of its tiers below
// the GPU pool, which the view does not answer for, still go to the
// router's index.
func (c *Cluster) viewKV(n *workerNode, idx int) error {
	if c.opts.kvEvents || !c.router.Config().UseKVEvents {
		return nil
	}
	view, ok := n.w.KVView()
	if !ok {
		return nil
	}
	var rv router.KVView = kvView{v: c.v, idx: idx, view: view}
	if c.opts.kvWrap != nil {
		rv = c.opts.kvWrap(n.id, rv)
	}
	if err := c.router.SetKVView(n.id, rv); err != nil {
		return fmt.Errorf("%s: %w", n.label(), err)
	}
	n.viewed = true
	if c.opts.kvTap == nil && c.cfg.OnKVEvents == nil {
		// Nothing reads its events now: the worker need not record them.
		n.w.OmitKVEvents()
	}
	return nil
}

func (l *localWorker) Apply(in engine.Input) { l.v.Schedule(l.v.Now(), l.idx, in) }

func (l *localWorker) Metrics() engine.Metrics { return l.w.Metrics() }
