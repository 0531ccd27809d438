package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/router"
)

// request is one Generate call's shared state. The dispatcher writes st
// under Cluster.mu and pokes; the Generate goroutine reads st under
// Cluster.mu after each poke.
type request struct {
	id        uint64
	tokens    []uint32
	maxTokens int
	prefill   *workerNode // aggregated: the one worker
	decode    *workerNode
	notify    chan struct{}
	st        reqState
}

type reqState struct {
	// prefill side (aggregated: the one worker)
	prefillDone               bool
	arrival, firstTokenAt     float64
	cachedTokens              int
	held, holdEnded           bool
	holdStart, holdEnd, pinMs float64
	holdOutcome               engine.Outcome
	tid                       uint64
	claimed                   bool    // the transfer started (EventTransferStart)
	transferMs                float64 // its modeled duration
	cancelled                 bool
	// prefillEnded says the prefill worker is done with the request: its
	// hold ended, or it was rejected or cancelled there.
	prefillEnded bool
	rejection    *engine.Rejection
	rejectedBy   *workerNode
	// decode side
	waitSeen                bool // waitStart is set
	waitStart, reservedAt   float64
	reserved, destCancelled bool
	missing                 int
	decodeWaitMs            float64
	done                    bool
	final                   engine.Completion
}

func (r *request) poke() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *request) prefillName() string {
	if r.prefill == nil {
		return ""
	}
	return r.prefill.name
}

// errClosed is the Result.Error of requests cut short by Close.
const errClosed = "cluster closed"

// Generate runs one request to its end and returns how it ended. It blocks
// until then, is safe for concurrent use, never panics and always returns
// exactly one Result: bad input is Outcome "error" naming the field; a
// cancelled ctx or Close is Outcome "error" after the request's KV has been
// released on every worker.
//
// Aggregated: the router places the request, the worker runs it and frees
// its KV. Disaggregated, vLLM (source-first): the prefill worker computes
// the prompt and the first token and holds the KV; the decode worker
// reserves room, connects to the prefill's transfer server, and the
// prefill starts the modeled transfer; when the transfer ends the prefill
// releases its KV, the decode is told ACK and produces the other tokens. If
// the prefill's abort (or session) timeout fires first, the decode is told
// ABORT whenever it connects and the request ends "aborted". SGLang
// (destination-first): the prefill waits in its bootstrap queue while the
// decode reserves, then computes, and its transfer starts with its hold,
// so it never waits on the decode; a decode that cannot reserve within
// handoff_session_timeout_ms ends the request "rejected". Each handoff step
// is stamped from the modeled time of the event that caused it (see the
// package doc), so host latency never becomes modeled time. A Result whose
// prefill held KV always carries the hold's final outcome and duration.
func (c *Cluster) Generate(ctx context.Context, req Request) (res Result) {
	if err := req.validate(); err != nil {
		return Result{Outcome: OutcomeError, Error: err.Error()}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Result{Outcome: OutcomeError, Error: errClosed}
	}
	c.nextID++
	id := c.nextID
	c.active++
	c.stats.requests++
	c.inflight.Add(1)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.active--
		c.count(&res)
		c.mu.Unlock()
		c.inflight.Done()
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.closeCtx, cancel)
	defer stop()

	r := &request{id: id, tokens: promptTokens(req, c.cfg.Seed, id), maxTokens: req.MaxTokens, notify: make(chan struct{}, 1)}
	rreq := &router.Request{ID: routerID(id), Tokens: r.tokens}
	defer c.router.Free(rreq.ID)
	if !c.cfg.Disagg {
		return c.generateAggregated(ctx, r, rreq)
	}
	return c.generateDisagg(ctx, r, rreq)
}

// count folds a finished request into the counters, under c.mu.
func (c *Cluster) count(res *Result) {
	switch res.Outcome {
	case OutcomeCompleted:
		c.stats.completed++
	case OutcomeAborted:
		c.stats.aborted++
	case OutcomeRejected:
		c.stats.rejected++
		if res.PrefillRejected {
			c.stats.prefillRejections++
		}
	default:
		c.stats.errored++
	}
}

func (c *Cluster) register(r *request) {
	c.mu.Lock()
	c.reqs[r.id] = r
	c.mu.Unlock()
}

func (c *Cluster) unregister(r *request) {
	c.mu.Lock()
	delete(c.reqs, r.id)
	c.mu.Unlock()
}

// wait blocks until cond holds on the request's state or ctx ends.
func (c *Cluster) wait(ctx context.Context, r *request, cond func(*reqState) bool) error {
	for {
		c.mu.Lock()
		ok := cond(&r.st)
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-r.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// snapshot copies the request's state.
func (c *Cluster) snapshot(r *request) reqState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return r.st
}

// stopped turns a ctx error into the Result: the caller's cancellation, or
// Close.
func (c *Cluster) stopped(err error) Result {
	msg := err.Error()
	select {
	case <-c.closing:
		msg = errClosed
	default:
	}
	return Result{Outcome: OutcomeError, Error: msg}
}

func (c *Cluster) generateAggregated(ctx context.Context, r *request, rreq *router.Request) Result {
	wid, err := c.router.Route(rreq)
	if err != nil {
		return routeRefusal(err)
	}
	w := c.workers[wid]
	r.prefill, r.decode = w, w
	c.register(r)
	defer c.unregister(r)
	base := Result{PrefillWorker: w.name, DecodeWorker: w.name}
	if err := w.live.Submit(engine.Request{ID: r.id, Tokens: r.tokens, MaxTokens: r.maxTokens}, engine.Release); err != nil {
		return withError(base, OutcomeError, fmt.Sprintf("submit to %s: %v", w.name, err))
	}
	if err := c.wait(ctx, r, func(s *reqState) bool { return s.done || s.rejection != nil || s.cancelled }); err != nil {
		w.live.Cancel(r.id)
		return merge(base, c.stopped(err))
	}
	s := c.snapshot(r)
	if s.rejection != nil {
		return withError(base, OutcomeRejected, s.rejection.Reason)
	}
	if !s.done {
		return withError(base, OutcomeError, "withdrawn by "+w.name)
	}
	res := base
	res.Outcome = OutcomeCompleted
	res.OutputTokens = s.final.OutputTokens
	res.CachedTokens = s.cachedTokens
	markTruncated(&res, w, s.final)
	c.timings(&res, s.arrival, s.firstTokenAt, s.final.At)
	return res
}

// markTruncated flags a completion that stopped short of max_tokens
// because its sequence hit a length limit on w, and says which: it is
// still "completed", but its output is shorter than asked.
func markTruncated(res *Result, w *workerNode, comp engine.Completion) {
	if !comp.Truncated {
		return
	}
	res.Truncated = true
	seq := comp.PromptTokens + comp.OutputTokens
	if m := w.args.MaxModelLen; m != nil && seq >= *m {
		res.Error = fmt.Sprintf("output truncated at %d tokens: the sequence (%d tokens) reached %s's max_model_len %d",
			comp.OutputTokens, seq, w.name, *m)
		return
	}
	res.Error = fmt.Sprintf("output truncated at %d tokens: the sequence outgrew %s's KV pool (%d tokens: num_gpu_blocks %d × block_size %d)",
		comp.OutputTokens, w.name, w.args.NumGPUBlocks*w.args.BlockSize, w.args.NumGPUBlocks, w.args.BlockSize)
}

// handoff is one disaggregated request between its two workers.
type handoff struct {
	c    *Cluster
	ctx  context.Context
	r    *request
	p, d *workerNode
	req  engine.Request
	base Result
	// submitted says the prefill worker got the request, so the Result
	// waits for the prefill's end.
	submitted bool
}

// end completes res from the request's state once the prefill worker is
// done with the request, so a Result whose prefill held KV carries the
// hold's final outcome and duration however the request ended. Every path
// here has ended the prefill's part or made sure it ends (the transfer's
// outcome, or cleanup's Cancel), so the wait is for the worker's event to
// be applied; only Close cuts it short.
func (h *handoff) end(res Result) Result {
	h.settle()
	return h.c.fill(res, h.r)
}

// settle waits until the prefill worker's end of the request is applied.
func (h *handoff) settle() {
	if h.submitted {
		_ = h.c.wait(h.c.closeCtx, h.r, func(s *reqState) bool { return s.prefillEnded })
	}
}

// cleanup withdraws the request from both workers: a prefill that holds KV
// releases it as aborted (the decode then gets ABORT), one still queued is
// dropped, and a reservation is freed.
func (h *handoff) cleanup() {
	h.p.live.Cancel(h.r.id)
	h.d.live.CancelDestination(h.r.id)
	h.d.live.Cancel(h.r.id)
}

// fail cleans up and returns res, completed from the request's state.
func (h *handoff) fail(res Result) Result {
	h.cleanup()
	return h.end(res)
}

func (h *handoff) errorf(format string, args ...any) Result {
	return h.fail(withError(h.base, OutcomeError, fmt.Sprintf(format, args...)))
}

// stopped ends the request after ctx ended (the caller's cancel, or Close).
func (h *handoff) stopped(err error) Result {
	return h.fail(merge(h.base, h.c.stopped(err)))
}

// reserve makes the decode a destination at modeled time at (the moment
// the prefill began to hold) and waits until its scheduler has reserved
// blocks and a sequence slot for it. ok false means the request is over,
// with res.
func (h *handoff) reserve(at float64) (res Result, ok bool) {
	if err := h.d.live.ReserveAt(at, h.req); err != nil {
		return h.errorf("reserve on %s: %v", h.d.name, err), false
	}
	err := h.c.wait(h.ctx, h.r, func(s *reqState) bool {
		return s.reserved || s.rejection != nil && s.rejectedBy == h.d || s.destCancelled
	})
	if err != nil {
		return h.stopped(err), false
	}
	return h.reserved()
}

// reserved turns the state after a wait for the reservation into the
// request's end when there is none.
func (h *handoff) reserved() (res Result, ok bool) {
	if s := h.c.snapshot(h.r); !s.reserved {
		if s.rejection != nil {
			return h.fail(withError(h.base, OutcomeRejected, s.rejection.Reason)), false
		}
		return h.errorf("reservation withdrawn by %s", h.d.name), false
	}
	return Result{}, true
}

// destinationFirst runs SGLang's order up to the prefill's hold. The
// request arrives at both workers at once: the prefill waits in its
// bootstrap queue, holding nothing, while the decode reserves; the
// reservation readies the prefill at the reservation's modeled time. If the
// decode cannot reserve within handoff_session_timeout_ms, the prefill's
// bootstrap wait times out, the reservation request is withdrawn at that
// time and the request ends "rejected". ok false means the request is
// over, with res.
func (h *handoff) destinationFirst() (res Result, tid uint64, ok bool) {
	c, r := h.c, h.r
	at := c.Now()
	if err := h.p.live.SubmitAt(at, h.req, engine.Hold); err != nil {
		return h.errorf("submit to %s: %v", h.p.name, err), 0, false
	}
	h.submitted = true
	if err := h.d.live.ReserveAt(at, h.req); err != nil {
		return h.errorf("reserve on %s: %v", h.d.name, err), 0, false
	}
	err := c.wait(h.ctx, r, func(s *reqState) bool {
		return s.reserved || s.rejection != nil || s.destCancelled || s.prefillEnded
	})
	if err != nil {
		return h.stopped(err), 0, false
	}
	s := c.snapshot(r)
	if !s.reserved {
		if s.rejection != nil && s.rejectedBy == h.p {
			return h.bootstrapTimeout(s.rejection), 0, false
		}
		res, _ := h.reserved()
		return res, 0, false
	}
	tokens := engine.TransferTokens(h.p.args.KVTransferTimingMode, len(r.tokens), s.missing)
	if !h.p.live.DestinationReadyAt(s.reservedAt, r.id, tokens) {
		// The bootstrap wait timed out before the reservation: its
		// rejection is on its way.
		h.settle()
		if s := c.snapshot(r); s.rejection != nil && s.rejectedBy == h.p {
			return h.bootstrapTimeout(s.rejection), 0, false
		}
		return h.errorf("prefill on %s left its bootstrap queue before its decode was ready", h.p.name), 0, false
	}
	res, tid, ok = h.awaitHold()
	return res, tid, ok
}

// bootstrapTimeout ends a destination-first request whose prefill was
// dropped from its bootstrap queue (engine.RejectHandoffTimeout): the
// decode's reservation request is withdrawn at the timeout's modeled time.
func (h *handoff) bootstrapTimeout(rej *engine.Rejection) Result {
	h.d.live.CancelDestinationAt(rej.At, h.r.id)
	msg := rej.Reason
	if rej.Code == engine.RejectHandoffTimeout {
		msg = fmt.Sprintf("handoff timeout: %s reserved no room within handoff_session_timeout_ms %d, so the prefill on %s was dropped from its bootstrap queue having computed and held nothing",
			h.d.name, h.p.args.HandoffSessionTimeoutMs, h.p.name)
	}
	return h.end(withError(h.base, OutcomeRejected, msg))
}

// awaitHold waits for the prefill to compute the prompt and hold its KV,
// which gives the handoff its transfer id. ok false means the request is
// over, with res.
func (h *handoff) awaitHold() (res Result, tid uint64, ok bool) {
	err := h.c.wait(h.ctx, h.r, func(s *reqState) bool {
		return s.tid != 0 || s.prefillEnded || (s.prefillDone && !s.held)
	})
	if err != nil {
		return h.stopped(err), 0, false
	}
	s := h.c.snapshot(h.r)
	if s.tid == 0 {
		if s.rejection != nil {
			return h.fail(withError(h.base, OutcomeRejected, s.rejection.Reason)), 0, false
		}
		return h.errorf("prefill on %s ended without holding KV", h.p.name), 0, false
	}
	return Result{}, s.tid, true
}

// generateDisagg runs the handoff in the order the engine serves it:
// source-first for vLLM (and SGLang with optimistic_prefill), where the
// prefill computes and holds before the decode reserves, so held KV can
// strand on a saturated decode; destination-first for SGLang, where the
// decode reserves before the prefill computes and the transfer starts with
// the hold, so nothing strands.
func (c *Cluster) generateDisagg(ctx context.Context, r *request, rreq *router.Request) Result {
	pid, did, err := c.router.RouteDisagg(rreq)
	if err != nil {
		return routeRefusal(err)
	}
	h := &handoff{c: c, ctx: ctx, r: r, p: c.workers[pid], d: c.workers[did],
		req: engine.Request{ID: r.id, Tokens: r.tokens, MaxTokens: r.maxTokens}}
	r.prefill, r.decode = h.p, h.d
	h.base = Result{PrefillWorker: h.p.name, DecodeWorker: h.d.name}
	c.register(r)
	defer c.unregister(r)

	var tid uint64
	if c.destFirst {
		// SGLang: the decode reserves while the prefill waits in its
		// bootstrap queue; the prefill's transfer starts the moment its
		// KV is held (the engine starts it, not the cluster).
		res, id, ok := h.destinationFirst()
		if !ok {
			return res
		}
		tid = id
	} else {
		// vLLM: the prefill computes and holds; the decode reserves from
		// the modeled instant the hold began, and its connection to the
		// transfer server starts the transfer (onDecodeArrived) at the
		// reservation's modeled time. The abort clock runs from the hold.
		if err := h.p.live.Submit(h.req, engine.Hold); err != nil {
			return h.errorf("submit to %s: %v", h.p.name, err)
		}
		h.submitted = true
		res, id, ok := h.awaitHold()
		if !ok {
			return res
		}
		tid = id
		if res, ok := h.reserve(c.snapshot(r).holdStart); !ok {
			return res
		}
	}
	return h.transfer(tid)
}

// transfer runs the decode side's half of the handoff once the prefill
// holds: read the params the prefill returned, wait at its transfer server
// for the outcome, and on ACK activate the reservation and decode.
func (h *handoff) transfer(tid uint64) Result {
	c, r, d := h.c, h.r, h.d
	// The decode side reads the params the prefill returned, as a remote
	// decode worker would.
	addr, room, err := c.handoffParams(h.p, tid)
	if err != nil {
		return h.errorf("%v", err)
	}
	status, err := bootstrap.Await(h.ctx, addr, room, r.id)
	switch {
	case status == bootstrap.StatusACK:
	case errors.Is(err, bootstrap.ErrAborted):
		// The source's hold is over: aborted by its deadline, or gone when
		// this decode connected. Its end may still be on its way from the
		// worker; wait for it, and free the reservation at the abort's
		// modeled time.
		h.settle()
		d.live.CancelDestinationAt(h.endedAt(), r.id)
		return h.end(withError(h.base, OutcomeAborted, err.Error()))
	case h.ctx.Err() != nil:
		return h.stopped(h.ctx.Err())
	default:
		h.cleanup()
		h.settle()
		// A refusal after the source aborted (its tombstone expired) is
		// still an abort.
		if s := c.snapshot(r); s.holdEnded && s.holdOutcome == engine.Aborted {
			return h.end(withError(h.base, OutcomeAborted, (&bootstrap.AbortError{TransferID: tid}).Error()))
		}
		return h.end(withError(h.base, OutcomeError, fmt.Sprintf("transfer %d: %v", tid, err)))
	}
	// The ACK follows the source's release, whose state is applied before
	// the server is told: activate at the release's modeled time.
	if !d.live.ActivateAt(h.endedAt(), r.id) {
		return h.errorf("activate on %s: reservation gone", d.name)
	}
	err = c.wait(h.ctx, r, func(s *reqState) bool {
		return s.done || (s.rejection != nil && s.rejectedBy == d) || s.cancelled
	})
	if err != nil {
		return h.stopped(err)
	}
	if s := c.snapshot(r); !s.done {
		return h.fail(withError(h.base, OutcomeError, "withdrawn by "+d.name))
	}
	res := h.base
	res.Outcome = OutcomeCompleted
	markTruncated(&res, d, c.snapshot(r).final)
	return h.end(res)
}

// endedAt is the modeled time the prefill's hold ended, or the cluster's
// clock when its end is not known.
func (h *handoff) endedAt() float64 {
	if s := h.c.snapshot(h.r); s.holdEnded {
		return s.holdEnd
	}
	return h.c.Now()
}

// handoffParams builds the params the prefill returns with its first token
// and reads them back as the decode side does: vLLM's {transfer_id,
// prefill_host, prefill_port} or SGLang's {bootstrap_host, bootstrap_port,
// bootstrap_room}. It returns the transfer server's address and the id.
func (c *Cluster) handoffParams(p *workerNode, tid uint64) (string, uint64, error) {
	if c.cfg.Engine == string(engine.EngineSGLang) {
		sp, _, err := bootstrap.ParseSGLangParams(p.server.SGLangParams(tid))
		return sp.Addr(), sp.BootstrapRoom, err
	}
	vp, _, err := bootstrap.ParseVLLMParams(p.server.VLLMParams(tid))
	return vp.Addr(), vp.TransferID, err
}

// fill adds what the request's state knows to res: timings, the hold and
// the handoff.
func (c *Cluster) fill(res Result, r *request) Result {
	s := c.snapshot(r)
	res.TransferID = s.tid
	res.CachedTokens = s.cachedTokens
	if s.held {
		res.Pinned = true
		if s.holdEnded {
			res.PinOutcome = s.holdOutcome.String()
			res.PinMs = s.pinMs
			if s.claimed {
				res.TransferMs = s.transferMs
			}
		}
	}
	switch {
	case s.reserved:
		res.DecodeWaitMs = s.reservedAt - s.waitStart
		if s.decodeWaitMs > 0 {
			res.DecodeWaitMs = s.decodeWaitMs
		}
	case s.waitSeen && s.holdEnded && s.holdOutcome == engine.Aborted:
		// The decode never got a reservation: it waited in vain from the
		// start of its wait until the source gave the hold up.
		res.DecodeWaitMs = max(0, s.holdEnd-s.waitStart)
	}
	// The request arrived when its first worker got it: the prefill
	// source-first, the decode destination-first, whose wait for a
	// reservation is then part of the time to first token.
	arrival := s.arrival
	if s.waitSeen && s.waitStart < arrival {
		arrival = s.waitStart
	}
	if s.prefillDone {
		res.OutputTokens = 1
		res.TTFTMs = s.firstTokenAt - arrival
	}
	if s.done {
		res.OutputTokens = s.final.OutputTokens
		c.timings(&res, arrival, s.firstTokenAt, s.final.At)
	}
	return res
}

// timings sets the latencies and checks causality: arrival ≤ first token ≤
// last token, in modeled time.
func (c *Cluster) timings(res *Result, arrival, first, last float64) {
	res.TTFTMs = first - arrival
	res.E2EMs = last - arrival
	if res.OutputTokens > 1 {
		res.ITLMs = (last - first) / float64(res.OutputTokens-1)
	}
	if arrival <= first && first <= last {
		return
	}
	c.mu.Lock()
	c.stats.causality++
	if c.stats.causalityExample == "" {
		c.stats.causalityExample = fmt.Sprintf("arrival %.3f, first token %.3f, last token %.3f (prefill %s, decode %s)",
			arrival, first, last, res.PrefillWorker, res.DecodeWorker)
	}
	c.mu.Unlock()
}

// routeRefusal turns a routing error into the Result: a busy refusal is
// "rejected" with the router's message naming the saturated pool, and
// PrefillRejected when that pool is the prefill one (or the aggregated
// one): the cascade's refusals. The role comes with the error, so it is
// the one the router saw, not a later look at the workers.
func routeRefusal(err error) Result {
	var busy *router.BusyError
	if errors.As(err, &busy) {
		return Result{Outcome: OutcomeRejected, Error: busy.Error(), PrefillRejected: busy.Role != router.RoleDecode}
	}
	return Result{Outcome: OutcomeError, Error: err.Error()}
}

func withError(base Result, outcome, msg string) Result {
	base.Outcome, base.Error = outcome, msg
	return base
}

func merge(base, r Result) Result {
	base.Outcome, base.Error = r.Outcome, r.Error
	return base
}
