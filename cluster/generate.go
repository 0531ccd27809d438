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
	rejection                 *engine.Rejection
	rejectedBy                *workerNode
	// decode side
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
// its KV. Disaggregated (vLLM, source-first): the prefill worker computes
// the prompt and the first token and holds the KV; the decode worker
// reserves room, connects to the prefill's transfer server, and the
// prefill starts the modeled transfer; when the transfer ends the prefill
// releases its KV, the decode is told ACK and produces the other tokens. If
// the prefill's abort (or session) timeout fires first, the decode is told
// ABORT whenever it connects and the request ends "aborted".
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
		return routeRefusal(err, "all workers busy", true)
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
	c.timings(&res, s.arrival, s.firstTokenAt, s.final.At)
	return res
}

// generateDisagg runs the handoff. The order of the steps follows the
// engine: vLLM computes the prefill first and holds; SGLang without
// optimistic prefill reserves the destination first, so it strands nothing
// on decode capacity.
func (c *Cluster) generateDisagg(ctx context.Context, r *request, rreq *router.Request) Result {
	pid, did, err := c.router.RouteDisagg(rreq)
	if err != nil {
		prefillBusy := errors.Is(err, router.ErrAllBusy) && c.roleBusy(router.RolePrefill)
		if prefillBusy {
			return routeRefusal(err, "all prefill workers busy", true)
		}
		return routeRefusal(err, "all decode workers busy", false)
	}
	p, d := c.workers[pid], c.workers[did]
	r.prefill, r.decode = p, d
	c.register(r)
	defer c.unregister(r)
	base := Result{PrefillWorker: p.name, DecodeWorker: d.name}
	ereq := engine.Request{ID: r.id, Tokens: r.tokens, MaxTokens: r.maxTokens}

	// cleanup withdraws the request from both workers: a cancelled prefill
	// that holds KV releases it as aborted (the decode then gets ABORT), and
	// a reservation is freed.
	cleanup := func() {
		p.live.Cancel(r.id)
		d.live.CancelDestination(r.id)
		d.live.Cancel(r.id)
	}
	// reserve makes the decode a destination and waits for its
	// reservation; watchPrefill also ends the wait when the prefill fails
	// (destination-first, where the prefill waits for the decode).
	reserve := func(watchPrefill bool) (Result, bool) {
		if err := d.live.Reserve(ereq); err != nil {
			return withError(base, OutcomeError, fmt.Sprintf("reserve on %s: %v", d.name, err)), false
		}
		err := c.wait(ctx, r, func(s *reqState) bool {
			return s.reserved || s.rejection != nil && (s.rejectedBy == d || watchPrefill) || s.destCancelled ||
				watchPrefill && s.cancelled
		})
		if err != nil {
			return merge(base, c.stopped(err)), false
		}
		if s := c.snapshot(r); !s.reserved {
			if s.rejection != nil {
				return withError(base, OutcomeRejected, s.rejection.Reason), false
			}
			return withError(base, OutcomeError, "reservation withdrawn by "+d.name), false
		}
		return Result{}, true
	}

	if err := p.live.Submit(ereq, engine.Hold); err != nil {
		cleanup()
		return withError(base, OutcomeError, fmt.Sprintf("submit to %s: %v", p.name, err))
	}
	if c.destFirst {
		// SGLang: the prefill waits in its bootstrap queue until the decode
		// has reserved; its transfer then starts the moment its KV is held.
		if res, ok := reserve(true); !ok {
			cleanup()
			return c.fill(res, r)
		}
		ready, ok := any(p.live).(interface {
			DestinationReady(id uint64, tokens int) bool
		})
		if !ok {
			cleanup()
			return c.fill(withError(base, OutcomeError, "engine sglang: destination-first handoff needs engine.Live.DestinationReady; set args.sglang.optimistic_prefill to run source-first"), r)
		}
		s := c.snapshot(r)
		if !ready.DestinationReady(r.id, engine.TransferTokens(p.args.KVTransferTimingMode, len(r.tokens), s.missing)) {
			// Gone from the bootstrap queue: timed out (a rejection on its
			// way) or cancelled.
			_ = c.wait(ctx, r, func(s *reqState) bool { return s.rejection != nil && s.rejectedBy == p || s.cancelled })
			cleanup()
			if s := c.snapshot(r); s.rejection != nil {
				return c.fill(withError(base, OutcomeRejected, s.rejection.Reason), r)
			}
			return c.fill(withError(base, OutcomeError, "prefill on "+p.name+" left its bootstrap queue before the decode was ready"), r)
		}
	}
	// The prefill's first token comes with the hold and its transfer id.
	err = c.wait(ctx, r, func(s *reqState) bool {
		return s.tid != 0 || (s.rejection != nil && s.rejectedBy == p) || s.cancelled || (s.prefillDone && !s.held)
	})
	if err != nil {
		cleanup()
		return c.fill(merge(base, c.stopped(err)), r)
	}
	s := c.snapshot(r)
	if s.tid == 0 {
		cleanup()
		if s.rejection != nil {
			return c.fill(withError(base, OutcomeRejected, s.rejection.Reason), r)
		}
		return c.fill(withError(base, OutcomeError, "prefill on "+p.name+" ended without holding KV"), r)
	}
	// The decode side reads the params the prefill returned, as a remote
	// decode worker would.
	addr, tid, err := c.handoffParams(p, s.tid)
	if err != nil {
		cleanup()
		return c.fill(withError(base, OutcomeError, err.Error()), r)
	}
	if !c.destFirst {
		if res, ok := reserve(false); !ok {
			cleanup()
			return c.fill(res, r)
		}
	}
	status, err := bootstrap.Await(ctx, addr, tid, r.id)
	switch {
	case status == bootstrap.StatusACK:
	case errors.Is(err, bootstrap.ErrAborted):
		d.live.CancelDestination(r.id)
		return c.fill(withError(base, OutcomeAborted, err.Error()), r)
	case ctx.Err() != nil:
		cleanup()
		return c.fill(merge(base, c.stopped(ctx.Err())), r)
	default:
		cleanup()
		// A refusal after the source aborted (its tombstone expired) is
		// still an abort.
		if st := c.snapshot(r); st.holdEnded && st.holdOutcome == engine.Aborted {
			return c.fill(withError(base, OutcomeAborted, (&bootstrap.AbortError{TransferID: s.tid}).Error()), r)
		}
		return c.fill(withError(base, OutcomeError, fmt.Sprintf("transfer %d: %v", s.tid, err)), r)
	}
	if !d.live.Activate(r.id) {
		cleanup()
		return c.fill(withError(base, OutcomeError, fmt.Sprintf("activate on %s: reservation gone", d.name)), r)
	}
	err = c.wait(ctx, r, func(s *reqState) bool {
		return s.done || (s.rejection != nil && s.rejectedBy == d) || s.cancelled
	})
	if err != nil {
		cleanup()
		return c.fill(merge(base, c.stopped(err)), r)
	}
	s = c.snapshot(r)
	if !s.done {
		return c.fill(withError(base, OutcomeError, "withdrawn by "+d.name), r)
	}
	res := base
	res.Outcome = OutcomeCompleted
	return c.fill(res, r)
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
	if s.reserved {
		res.DecodeWaitMs = s.reservedAt - s.waitStart
		if s.decodeWaitMs > 0 {
			res.DecodeWaitMs = s.decodeWaitMs
		}
	}
	if s.prefillDone {
		res.OutputTokens = 1
		res.TTFTMs = s.firstTokenAt - s.arrival
	}
	if s.done {
		res.OutputTokens = s.final.OutputTokens
		c.timings(&res, s.arrival, s.firstTokenAt, s.final.At)
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

// roleBusy reports whether every worker of role is busy for the router now.
func (c *Cluster) roleBusy(role router.Role) bool {
	any := false
	for _, w := range c.router.Workers() {
		if w.Info.Role != role {
			continue
		}
		if !w.Busy {
			return false
		}
		any = true
	}
	return any
}

func routeRefusal(err error, busyMsg string, prefill bool) Result {
	if errors.Is(err, router.ErrAllBusy) {
		return Result{Outcome: OutcomeRejected, Error: busyMsg, PrefillRejected: prefill}
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
