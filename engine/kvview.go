package engine

import "github.com/kvstrand/mocker/kv"

// KVView reads a worker's prefix cache as a router fed the worker's KV
// events sees it: what the events delivered so far have put in the
// router's index. An in-process cluster asks it instead of replaying every
// Stored and Removed block into an index, and gets the same answers, barring
// a collision of 64-bit block hashes.
//
// The view and the pool differ in two ways, both kept by the pool as it
// goes. A pass's stores and evictions reach a router as events at the
// pass's End, so while the pass is in flight the router does not have
// them yet. And a router drops a Stored event whose parent block it does
// not hold (see indexer.ErrUnknownParent): the blocks of such an event are
// hidden from it for as long as the pool keeps them.
//
// The view holds for a worker whose index changes only during its passes,
// which is every vLLM worker that announces blocks: a prefill or
// aggregated worker with prefix caching on. Worker.KVView offers no other.
type KVView struct {
	p *blockPool
}

// KVView returns the worker's view of its prefix cache, or false when it
// has none to offer: a worker that announces no blocks (a decode worker,
// prefix caching off), or one whose cache is SGLang's radix tree.
func (w *Worker) KVView() (KVView, bool) {
	v, ok := w.sched.(*VLLM)
	if !ok || !v.caching || v.decodeWorker {
		return KVView{}, false
	}
	return KVView{p: v.pool}, true
}

// MuteKVEvents stops the worker recording KV events: its Outputs carry none
// from then on. A caller that reads the worker's KVView has no use for
// them. It does nothing to a worker that records none.
func (w *Worker) MuteKVEvents() {
	switch s := w.sched.(type) {
	case *VLLM:
		s.pool.ev.emit = false
	case *SGLang:
		s.cache.ev.emit = false
	}
}

// Depth is how many leading blocks of seqs the router holds for the
// worker. inFlight says whether the worker's last pass is still in
// flight, its events not delivered yet.
func (x KVView) Depth(seqs []kv.SeqHash, inFlight bool) int {
	p := x.p
	for i, h := range seqs {
		if i%prefixTouch == 0 {
			p.touch(seqs[i:min(i+prefixTouch, len(seqs))])
		}
		if s, ok := p.index.get(h, p.blocks); ok {
			if b := &p.blocks[s]; !b.hidden && !(inFlight && b.pass == p.pass) {
				continue
			}
		}
		if inFlight && p.goneHas(h) {
			continue
		}
		return i
	}
	return len(seqs)
}

// Blocks is how many blocks the router holds for the worker; inFlight as
// for Depth.
func (x KVView) Blocks(inFlight bool) int {
	p := x.p
	if inFlight {
		return p.visible - p.freshVisible + len(p.gone)
	}
	return p.visible
}

// Outside counts the changes to the worker's index made outside a pass,
// which a view cannot place in time; a worker KVView is offered for makes
// none, and tests check it.
func (x KVView) Outside() int { return x.p.outside }
