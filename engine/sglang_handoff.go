package engine

import "fmt"

// Reserve implements Handoffs: req waits in the normal queue until
// admission can give it pages for its whole prompt (reusing cached pages),
// as a reservation; like Dynamo's, it takes no running slot. It never times out here; the
// source's deadlines are authoritative and end it through
// CancelDestination.
func (g *SGLang) Reserve(now float64, req Request, events *[]Event) error {
	if g.prefillWorker {
		return errPrefillDestination(req.ID)
	}
	r, err := g.enqueue(now, req, Release)
	if err != nil {
		return err
	}
	r.state = sgAwaitKV
	g.waiting = append(g.waiting, r)
	g.waitStart(now, req.ID, events)
	return nil
}

// reserve admits the destination r during admission: pages for its whole
// prompt, every full cached page reused (the KV arrives complete, so no
// token is recomputed), plus its clipped output set aside like a running
// request's. ok false leaves r queued; cost is what it took from the
// remaining budget.
func (g *SGLang) reserve(r *sgReq, now float64, idle bool, remTotal float64, out *Output) (ok bool, cost int) {
	if why := g.neverFits(r); why != "" {
		// The wait ends here too, so the forensic log closes it.
		g.endDest(now, r.id, EventDestinationCancelled, &out.Events)
		out.Rejections = append(out.Rejections, Rejection{RequestID: r.id, At: now, Code: RejectNeverFits, Reason: why})
		r.state = sgDone
		return true, 0
	}
	hits, last := 0, int32(noSlot)
	if g.caching {
		full := r.prompt / g.page
		r.ensureHashes(full, g.page, &g.arenas)
		hits, last = g.cache.match(r.hashes[:full])
	}
	missing := r.prompt - hits*g.page
	// A transfer moves whole pages: the reservation reports the missing
	// pages' footprint.
	missingPages := ceilDiv(missing, g.page) * g.page
	growth := min(r.maxOut-1, g.clip)
	// Locking the reused pages takes the unlocked ones out of the
	// evictable room the budget counted.
	cost = ceilDiv(missing, g.page)*g.page + growth + g.cache.lockCost(last)*g.page
	if !idle && float64(cost) >= remTotal {
		return false, 0
	}
	if !g.materialize(r, hits, last, missing) {
		g.oom = true
		g.ratio = g.initRatio
		return false, 0
	}
	r.admitted = true
	r.cached = int32(hits * g.page)
	r.queued = float32(now - r.arrival)
	r.growth = growth
	g.reservedGrowth += growth
	r.state = sgReserved
	g.noteReserved(now, r.id, r.depth+len(r.pages), missingPages, &out.Events)
	return true, cost
}

// Activate implements Handoffs: the reservation becomes a running request
// whose prompt KV is in place and whose first token came from the prefill
// side; its next decode pass computes that token's KV and emits token 1.
func (g *SGLang) Activate(now float64, id uint64, events *[]Event) bool {
	r, ok := g.byID.Get(id)
	if !ok || r.state != sgReserved {
		return false
	}
	g.endDest(now, id, EventDestinationActivated, events)
	g.reservedGrowth -= r.growth
	r.out = 1
	r.firstAt = now
	if r.out >= r.maxOut {
		g.done = append(g.done, r.completion(now))
		g.freeKV(r)
		g.recycle(r)
		return true
	}
	r.push(placeholderToken)
	// It runs once a running slot is free (reservations take none).
	r.state = sgActivated
	g.activated = append(g.activated, r)
	return true
}

// CancelDestination implements Handoffs.
func (g *SGLang) CancelDestination(now float64, id uint64, events *[]Event) bool {
	r, ok := g.byID.Get(id)
	if !ok {
		return false
	}
	switch r.state {
	case sgAwaitKV:
		g.waiting = removeReq(g.waiting, r)
	case sgReserved:
		g.reservedGrowth -= r.growth
		g.freeKV(r)
	default:
		return false
	}
	g.endDest(now, id, EventDestinationCancelled, events)
	g.recycle(r)
	return true
}

// DestinationReady tells a destination-first prefill that its decode side
// has reserved: the request leaves the bootstrap queue for the waiting
// queue, and when its prefill ends the transfer of transferTokens tokens
// (TransferTokens of the reservation) starts at once, so the hold lasts
// only the modeled transfer. Events it causes go to events. False when id
// is not in the bootstrap queue (unknown, timed out, cancelled, already
// ready, or not a destination-first prefill).
func (g *SGLang) DestinationReady(now float64, id uint64, transferTokens int, events *[]Event) bool {
	r, ok := g.byID.Get(id)
	if !ok || r.state != sgBoot {
		return false
	}
	g.leaveBoot(r)
	r.state = sgWaiting
	r.destReady = true
	r.transferTokens = transferTokens
	g.waiting = append(g.waiting, r)
	return true
}

// bootEntry is one place in the bootstrap queue: r, as long as r is still
// in the queue under the same entry (recycled requests are reused).
type bootEntry struct {
	r   *sgReq
	seq uint64
}

func (e bootEntry) live() bool { return e.r.state == sgBoot && e.r.bootSeq == e.seq }

// leaveBoot takes r out of the bootstrap queue. Its entry goes stale and
// is dropped once every entry before it has gone.
func (g *SGLang) leaveBoot(r *sgReq) {
	r.bootSeq = 0
	g.bootLive--
	g.pruneBoot()
}

// pruneBoot drops stale entries from the head of the bootstrap queue, so
// the head, if any, is a live request, and reclaims the consumed prefix
// once it is most of the slice.
func (g *SGLang) pruneBoot() {
	for g.bootHead < len(g.boot) && !g.boot[g.bootHead].live() {
		g.boot[g.bootHead] = bootEntry{}
		g.bootHead++
	}
	switch {
	case g.bootHead == len(g.boot):
		g.boot, g.bootHead = g.boot[:0], 0
	case g.bootHead > 64 && 2*g.bootHead > len(g.boot):
		n := copy(g.boot, g.boot[g.bootHead:])
		clear(g.boot[n:])
		g.boot, g.bootHead = g.boot[:n], 0
	}
}

// bootDeadline is when the oldest bootstrap request times out.
func (g *SGLang) bootDeadline() (float64, bool) {
	if g.bootHead == len(g.boot) || g.sessionMs <= 0 {
		return 0, false
	}
	return g.boot[g.bootHead].r.arrival + g.sessionMs, true
}

// NextDeadline implements Handoffs: the earliest of the holds' deadlines
// and the bootstrap queue's session timeouts.
func (g *SGLang) NextDeadline() (float64, bool) {
	t, ok := g.handoffBook.NextDeadline()
	if b, bok := g.bootDeadline(); bok && (!ok || b < t) {
		t, ok = b, true
	}
	return t, ok
}

// NextContested is the earliest deadline a late input could pre-empt: an
// unclaimed hold's abort or session deadline, or a bootstrap request's
// session timeout, which a DestinationReady stamped before it would have
// averted.
func (g *SGLang) NextContested() (float64, bool) {
	t, ok := g.handoffBook.NextContested()
	if b, bok := g.bootDeadline(); bok && (!ok || b < t) {
		t, ok = b, true
	}
	return t, ok
}

// FireDue implements Handoffs. A bootstrap request whose session timed out
// is rejected (RejectHandoffTimeout, reported by the next pass, stamped at
// its deadline).
func (g *SGLang) FireDue(now float64, events *[]Event) bool {
	fired := g.handoffBook.FireDue(now, events)
	for {
		at, ok := g.bootDeadline()
		if !ok || at > now {
			break
		}
		r := g.boot[g.bootHead].r
		g.leaveBoot(r)
		g.expired = append(g.expired, Rejection{RequestID: r.id, At: at, Code: RejectHandoffTimeout,
			Reason: fmt.Sprintf("no decode side reserved within handoff_session_timeout_ms %.0f of submit; the prefill never ran and held nothing",
				g.sessionMs)})
		g.recycle(r)
		fired = true
	}
	return fired
}
