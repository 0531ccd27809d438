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
	// TreeSize is how many blocks the kv index holds for the worker, or,
	// with KVView, would hold.
	TreeSize int
	// KVView says the router reads the worker's blocks through a view
	// (SetKVView), not the index.
	KVView bool
	// Busy says the worker is over a busy threshold and out of rotation.
	Busy bool
}

type worker struct {
	info     WorkerInfo
	role     int
	slot     int32 // index in Router.slots, which the block table names it by
	inflight int
	prefill  int // pending prefill tokens
	active   int // predicted active blocks
	load     Load
	// view, when set, answers for the worker in place of the index.
	view KVView
	// per-decision scratch
	overlap int
	// tier is the weighted count of blocks the worker's lower tiers hold
	// continuing its GPU overlap (host_cache_hit_weight per host block,
	// disk_cache_hit_weight per disk or object one); kv mode only.
	tier   float64
	shared int
	cost   float64
}

// holder is one worker's reference count on a shared block. It names the
// worker by slot, not pointer, so the block table holds no pointers: the
// garbage collector neither scans it nor takes write barriers as entries
// move.
type holder struct {
	slot int32
	refs int32
}

// blockRefs records which workers hold a block actively and how many of
// their in-flight requests use it. The first holder is inline because most
// blocks live on one worker; the others, rare, are in the list
// Router.mores[more-1] (more 0: none).
type blockRefs struct {
	first holder
	more  int32
}

// ref adds one reference from w to the block under h, counting a block that
// is new to w in w's active blocks. The entry is found, or added, in one
// probe and updated in place.
func (r *Router) ref(h kv.SeqHash, w *worker) {
	e, added := r.blocks.Ref(h)
	switch {
	case added:
		e.first = holder{w.slot, 1}
		w.active++
	case e.first.slot == w.slot:
		e.first.refs++
	default:
		if e.more == 0 {
			e.more = r.newMore()
		}
		more := &r.mores[e.more-1]
		for i := range *more {
			if (*more)[i].slot == w.slot {
				(*more)[i].refs++
				return
			}
		}
		*more = append(*more, holder{w.slot, 1})
		w.active++
	}
}

// unref drops one reference from w to the block under h.
func (r *Router) unref(h kv.SeqHash, w *worker) {
	e := r.blocks.Lookup(h)
	if e == nil {
		return
	}
	if e.first.slot == w.slot {
		if e.first.refs--; e.first.refs == 0 {
			w.active--
			if e.more != 0 && len(r.mores[e.more-1]) > 0 {
				more := r.mores[e.more-1]
				n := len(more) - 1
				e.first = more[n]
				r.mores[e.more-1] = more[:n]
			} else {
				if e.more != 0 {
					r.spareMores = append(r.spareMores, e.more)
				}
				r.blocks.Delete(h)
			}
		}
		return
	}
	if e.more == 0 {
		return
	}
	more := r.mores[e.more-1]
	for i := range more {
		if more[i].slot != w.slot {
			continue
		}
		if more[i].refs--; more[i].refs == 0 {
			w.active--
			last := len(more) - 1
			more[i] = more[last]
			r.mores[e.more-1] = more[:last]
		}
		return
	}
}

// newMore returns the number (index + 1) of an empty list in r.mores for a
// block's further holders, reusing one of a block no longer active.
func (r *Router) newMore() int32 {
	if n := len(r.spareMores); n > 0 {
		m := r.spareMores[n-1]
		r.spareMores = r.spareMores[:n-1]
		return m
	}
	r.mores = append(r.mores, nil)
	return int32(len(r.mores))
}
