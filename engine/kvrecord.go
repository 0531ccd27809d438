package engine

import (
	"slices"

	"github.com/kvstrand/mocker/kv"
)

// kvRecorder collects one pass's KV events for either cache model: the vLLM
// block pool and the SGLang radix cache announce their blocks the same way.
// Contiguous stores (each block's parent is the previous block of the event)
// share one Stored event, and consecutive evictions one Removed event, as
// vLLM's pool does. A recorder built with emit false records nothing, so a
// worker that never announces pays only a branch.
//
// A recorder told to omit (Worker.OmitKVEvents) records none of the GPU
// pool's events, but notes that a pass had some to announce, so that its
// Output, without them, is still not empty and reaches its driver when it
// would have with them. It still records the events of the tiers below
// the GPU pool, which a worker's KV view does not answer for.
type kvRecorder struct {
	emit    bool
	omit    bool
	dropped bool // something was not recorded since reset
	next    uint64
	// nextTier numbers the events of each tier below the GPU pool (by
	// medium, from kv.MediumCPU), apart from the GPU pool's and from each
	// other, so that a consumer of one medium's events sees no gaps.
	nextTier [kv.NumMedia - 1]uint64
	recs     []evRec
	blocks   []kv.Block
	removes  []kv.SeqHash

	// With withTokens (Worker.RecordKVTokens), the token ids of every
	// block recorded stored go to toks, bs per block in the order of
	// blocks: block j of the sequence being stored is seq[j*bs-seqAt:]
	// (its caller names the sequence with storing before it stores).
	withTokens bool
	bs         int
	seq        []uint32
	seqAt      int
	toks       []uint32
}

// evRec is a KV event under construction. Its blocks live in the
// recorder's arenas until the pass ends, so recording allocates nothing once
// the arenas have grown to a pass's size.
type evRec struct {
	id         uint64
	kind       kv.EventKind
	medium     kv.Medium
	parent     kv.SeqHash
	hasParent  bool
	start, end int
}

// storing names the sequence whose blocks the next stores are: its
// tokens from position at on. Only a recorder withTokens reads them.
func (r *kvRecorder) storing(tokens []uint32, at int) {
	r.seq, r.seqAt = tokens, at
}

// blockTokens records the token ids of blocks j to j+n-1 of the sequence
// being stored.
func (r *kvRecorder) blockTokens(j, n int) {
	from := j*r.bs - r.seqAt
	r.toks = append(r.toks, r.seq[from:from+n*r.bs]...)
}

// stored records that the block with sequence hash h (token hash local),
// block j of its sequence, became findable, chained after parent when
// hasParent.
func (r *kvRecorder) stored(h kv.SeqHash, local kv.LocalHash, parent kv.SeqHash, hasParent bool, j int) {
	if !r.emit {
		r.dropped = true
		return
	}
	if r.withTokens {
		r.blockTokens(j, 1)
	}
	if n := len(r.recs); n > 0 {
		last := &r.recs[n-1]
		if last.kind == kv.Stored && last.medium == kv.MediumGPU && hasParent && last.end == len(r.blocks) && r.blocks[last.end-1].Hash == parent {
			r.blocks = append(r.blocks, kv.Block{Hash: h, TokensHash: local})
			last.end++
			return
		}
	}
	r.blocks = append(r.blocks, kv.Block{Hash: h, TokensHash: local})
	r.recs = append(r.recs, evRec{id: r.next, kind: kv.Stored, parent: parent, hasParent: hasParent,
		start: len(r.blocks) - 1, end: len(r.blocks)})
	r.next++
}

// storedNext records that the block with sequence hash h (token hash
// local), block j of its sequence, became findable right after the block
// the last stored call recorded, whose hash is its parent: it joins that
// block's event. It is stored, less the checks its caller has made.
func (r *kvRecorder) storedNext(h kv.SeqHash, local kv.LocalHash, j int) {
	if r.withTokens {
		r.blockTokens(j, 1)
	}
	r.blocks = append(r.blocks, kv.Block{Hash: h, TokensHash: local})
	r.recs[len(r.recs)-1].end++
}

// storedNextRun is storedNext of each of hs, whose token hashes are ls,
// blocks j, j+1, ... of their sequence.
func (r *kvRecorder) storedNextRun(hs []kv.SeqHash, ls []kv.LocalHash, j int) {
	if r.withTokens {
		r.blockTokens(j, len(hs))
	}
	ls = ls[:len(hs)]
	for k, h := range hs {
		r.blocks = append(r.blocks, kv.Block{Hash: h, TokensHash: ls[k]})
	}
	r.recs[len(r.recs)-1].end += len(hs)
}

// removedRun records that n blocks were evicted, one after another, and
// returns the n places for their sequence hashes, which the caller fills in
// eviction order: it is n calls of removed. It returns nil when the
// recorder records nothing.
func (r *kvRecorder) removedRun(n int) []kv.SeqHash {
	if n == 0 {
		return nil
	}
	if !r.emit {
		r.dropped = true
		return nil
	}
	start := len(r.removes)
	r.removes = slices.Grow(r.removes, n)[:start+n]
	if k := len(r.recs); k > 0 && r.recs[k-1].kind == kv.Removed && r.recs[k-1].medium == kv.MediumGPU && r.recs[k-1].end == start {
		r.recs[k-1].end += n
	} else {
		r.recs = append(r.recs, evRec{id: r.next, kind: kv.Removed, start: start, end: start + n})
		r.next++
	}
	return r.removes[start : start+n]
}

// removed records that the block with sequence hash h was evicted.
func (r *kvRecorder) removed(h kv.SeqHash) {
	if !r.emit {
		r.dropped = true
		return
	}
	if n := len(r.recs); n > 0 {
		last := &r.recs[n-1]
		if last.kind == kv.Removed && last.medium == kv.MediumGPU && last.end == len(r.removes) {
			r.removes = append(r.removes, h)
			last.end++
			return
		}
	}
	r.removes = append(r.removes, h)
	r.recs = append(r.recs, evRec{id: r.next, kind: kv.Removed, start: len(r.removes) - 1, end: len(r.removes)})
	r.next++
}

// storedTier records that the block with sequence hash h was copied to
// the lower tier of medium m (kv.MediumCPU or below). Consecutive ones of a
// medium share one Stored event, parentless and without token ids or token
// hashes, as vLLM announces the blocks its CPU offloading stores: a router
// does not index them.
func (r *kvRecorder) storedTier(m kv.Medium, h kv.SeqHash) {
	if !r.emit && !r.omit {
		return
	}
	if n := len(r.recs); n > 0 {
		last := &r.recs[n-1]
		if last.kind == kv.Stored && last.medium == m && last.end == len(r.blocks) {
			r.blocks = append(r.blocks, kv.Block{Hash: h})
			last.end++
			return
		}
	}
	r.blocks = append(r.blocks, kv.Block{Hash: h})
	r.recs = append(r.recs, evRec{id: r.nextTier[m-1], kind: kv.Stored, medium: m,
		start: len(r.blocks) - 1, end: len(r.blocks)})
	r.nextTier[m-1]++
}

// removedTier records that the lower tier of medium m dropped the block
// with sequence hash h. Consecutive ones of a medium share one Removed
// event.
func (r *kvRecorder) removedTier(m kv.Medium, h kv.SeqHash) {
	if !r.emit && !r.omit {
		return
	}
	if n := len(r.recs); n > 0 {
		last := &r.recs[n-1]
		if last.kind == kv.Removed && last.medium == m && last.end == len(r.removes) {
			r.removes = append(r.removes, h)
			last.end++
			return
		}
	}
	r.removes = append(r.removes, h)
	r.recs = append(r.recs, evRec{id: r.nextTier[m-1], kind: kv.Removed, medium: m,
		start: len(r.removes) - 1, end: len(r.removes)})
	r.nextTier[m-1]++
}

// flush appends the recorded events to dst; they point into the recorder's
// arenas, which stay untouched until reset.
func (r *kvRecorder) flush(dst []kv.Event) []kv.Event {
	for _, rec := range r.recs {
		ev := kv.Event{ID: rec.id, Kind: rec.kind, Medium: rec.medium}
		if rec.kind == kv.Stored {
			ev.Parent, ev.HasParent = rec.parent, rec.hasParent
			ev.Blocks = r.blocks[rec.start:rec.end:rec.end]
		} else {
			ev.RemovedHashes = r.removes[rec.start:rec.end:rec.end]
		}
		dst = append(dst, ev)
	}
	return dst
}

// omitAll makes a recorder that records omit instead; one that records
// nothing (a worker that announces no blocks) stays as it is, so that its
// Outputs stay empty when nothing else happened.
func (r *kvRecorder) omitAll() {
	if r.emit {
		r.emit, r.omit = false, true
	}
}

// flushTo is flush into out's KVEvents, marking out as not empty when the
// recorder omitted events.
func (r *kvRecorder) flushTo(out *Output) {
	out.KVEvents = r.flush(out.KVEvents)
	if r.withTokens {
		out.KVTokens = r.toks[:len(r.toks):len(r.toks)]
	}
	if r.omit && r.dropped {
		out.kvOmitted = true
	}
}

// reset empties the recorder for the next pass, keeping its arenas.
func (r *kvRecorder) reset() {
	r.dropped = false
	r.recs = r.recs[:0]
	r.blocks = r.blocks[:0]
	r.removes = r.removes[:0]
	r.toks = r.toks[:0]
}
