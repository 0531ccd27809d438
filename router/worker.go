package router

import (
	"fmt"

	"github.com/kvstrand/mocker/kv"
)

// Role is the part of serving a worker plays. The strings match the engine's
// worker types.
type Role string

// Worker roles.
const (
	RoleAggregated Role = "aggregated"
	RolePrefill    Role = "prefill"
	RoleDecode     Role = "decode"
)

func (r Role) index() (int, error) {
	switch r {
	case RoleAggregated:
		return 0, nil
	case RolePrefill:
		return 1, nil
	case RoleDecode:
		return 2, nil
	}
	return 0, fmt.Errorf("role %q is not valid; valid roles: aggregated, prefill, decode", string(r))
}

// WorkerInfo describes a routing target as discovery announces it: one
// data-parallel rank of a worker. A worker with data_parallel_size n is n
// targets, each with its own ID (its own load, in-flight count and index
// entries) and DPRank set, so the router places requests on (worker, rank)
// pairs.
type WorkerInfo struct {
	// ID names the target in routing decisions, KV events and load
	// reports; unique per (worker, rank).
	ID   uint64
	Role Role
	// DPRank is the target's data-parallel rank within its worker, 0 for
	// a worker with one rank. The router reports it and does not route by
	// it: the ID already tells ranks apart.
	DPRank uint32
	// TotalBlocks is the worker's KV capacity, used by the busy threshold
	// until the worker reports its own total in a Load.
	TotalBlocks int
	// BlockSize is the worker's tokens per block; 0 means the router's. Any
	// other value than the router's is refused, since block hashes would not
	// compare.
	BlockSize int
	// MaxBatchedTokens is the worker's max_num_batched_tokens, the base of
	// active_prefill_tokens_threshold_frac; 0 means unknown, read as
	// DefaultMaxBatchedTokens.
	MaxBatchedTokens int
}

// Load is what a worker reports about itself. The router uses it to spot
// busy workers and, in least-loaded mode, to break in-flight ties; the kv
// cost uses the router's own prediction instead, which is current at the
// moment of each decision.
type Load struct {
	// ActiveBlocks counts every allocated block (the capacity view).
	ActiveBlocks int
	// RouterActiveBlocks is the router-facing view: active blocks, minus
	// those held for a handoff unless the engine is told to count them.
	// Busy detection and least-loaded read this one.
	RouterActiveBlocks int
	// TotalBlocks is the KV capacity; 0 keeps WorkerInfo.TotalBlocks.
	TotalBlocks int
	// Running and Waiting are the engine's request queue lengths.
	Running int
	Waiting int
}

// LoadSink receives worker load reports, from whatever transport carries
// them.
type LoadSink interface {
	UpdateLoad(workerID uint64, l Load)
}

// WorkerState is a snapshot of what the router knows about one worker.
type WorkerState struct {
	Info WorkerInfo
	// InFlight counts requests routed to the worker and not yet finished
	// with it (a prefill worker is finished at PrefillDone).
	InFlight int
	// PrefillTokens is the uncached prompt tokens routed to the worker and
	// not yet prefilled.
	PrefillTokens int
	// ActiveBlocks is the router's prediction of the worker's active blocks:
	// distinct blocks of its in-flight requests.
	ActiveBlocks int
	// Load is the worker's last report (zero until one arrives).
	Load Load
	// TreeSize is how many blocks the kv index holds for the worker.
	TreeSize int
	// Busy says the worker is over a busy threshold and out of rotation.
	Busy bool
}

type worker struct {
	info     WorkerInfo
	role     int
	inflight int
	prefill  int // pending prefill tokens
	active   int // predicted active blocks
	load     Load
	// per-decision scratch
	overlap int
	shared  int
	cost    float64
}

// holder is one worker's reference count on a shared block.
type holder struct {
	w    *worker
	refs int32
}

// blockRefs records which workers hold a block actively and how many of
// their in-flight requests use it. The first holder is inline because most
// blocks live on one worker.
type blockRefs struct {
	first holder
	more  []holder
}

// ref adds one reference from w to the block under h, counting a block that
// is new to w in w's active blocks. The entry is found, or added, in one
// probe and updated in place.
func (r *Router) ref(h kv.SeqHash, w *worker) {
	e, _ := r.blocks.Ref(h)
	switch {
	case e.first.w == nil:
		e.first = holder{w, 1}
		w.active++
	case e.first.w == w:
		e.first.refs++
	default:
		for i := range e.more {
			if e.more[i].w == w {
				e.more[i].refs++
				return
			}
		}
		e.more = append(e.more, holder{w, 1})
		w.active++
	}
}

// unref drops one reference from w to the block under h.
func (r *Router) unref(h kv.SeqHash, w *worker) {
	e := r.blocks.Lookup(h)
	if e == nil {
		return
	}
	if e.first.w == w {
		if e.first.refs--; e.first.refs == 0 {
			w.active--
			if n := len(e.more); n > 0 {
				e.first = e.more[n-1]
				e.more[n-1] = holder{}
				e.more = e.more[:n-1]
			} else {
				r.blocks.Delete(h)
			}
		}
		return
	}
	for i := range e.more {
		if e.more[i].w != w {
			continue
		}
		if e.more[i].refs--; e.more[i].refs == 0 {
			w.active--
			last := len(e.more) - 1
			e.more[i] = e.more[last]
			e.more[last] = holder{}
			e.more = e.more[:last]
		}
		return
	}
}
