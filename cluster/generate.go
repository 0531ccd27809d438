package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/handoff"
	"github.com/kvstrand/mocker/internal/spare"
	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/router"
)

// call is one Generate call as the loop sees it. r is set by the loop.
type call struct {
	req   Request
	reply chan Result
	// A stepped cluster's calls (Submit) get their result through done,
	// on the goroutine settling the cluster, and are stopped when ctx
	// ends; key orders the calls handed in at one instant.
	done func(Result)
	ctx  context.Context
	key  Key
	// hasAt: a SubmitAt call, which arrives at atMs.
	atMs  float64
	hasAt bool
	// A GenerateThenPause call: wantPause asks for a pause with the result
	// (pause is its id, set before the reply is sent).
	wantPause  bool
	pause      uint64
	r          *request // owned by the loop
	stopReason string   // a stop that came before the arrival was handled
	// batch, when set, collects the result instead of reply: RunVirtual's
	// arrivals, which need no channel each.
	batch *batchResults
	index int // the result's place in batch
	// spare calls are the loop's own (RunVirtual's arrivals): it keeps
	// them for later arrivals once their result is given.
	spare bool
	// pd, when set, is a call pinned to one worker (GenerateOn, Prefill,
	// Decode: pd.go).
	pd *pdCall
}

// deliver gives the caller its result. It runs on the loop.
func (h *call) deliver(res Result) {
	if h.done != nil {
		h.done(res)
		return
	}
	if h.batch != nil {
		h.batch.put(h.index, res)
		return
	}
	h.reply <- res
}

// request is one request in flight: its handoff machine and workers.
type request struct {
	id uint64
	// h is the request's call; nil for an arrival of RunVirtual's, whose
	// call went to the next arrival once the request was built: its result
	// goes to batch's place index.
	h       *call
	batch   *batchResults
	index   int
	machine handoff.Machine
	lease   router.Lease // its claim on the router's load tracking
	prefill *workerNode
	decode  *workerNode
	tid     uint64     // transfer id, once the prefill holds
	closed  bool       // its transfer room was closed
	routed  bool       // machine is the request's
	room    memRoom    // its transfer room, on the in-memory link
	prompt  *promptBuf // its prompt's tokens and hashes, until it ends (nil: the caller's and the memo's)
	pd      *pdReq     // a split request's (Prefill, then Decode: pd.go)
}

// hashMemo keeps the prompt hashes of token slices that arrive more than
// once, by identity: a virtual run that replays a set of prompts (the
// arrivals share their Tokens, which must not change during the run)
// hashes each once. A slice is remembered at its first arrival and hashed
// for keeps at its second; both are bounded, so a run of distinct prompts
// costs a map lookup each and a few megabytes at most.
type hashMemo struct {
	byTokens map[tokensKey]*kv.Hashes // nil: seen once
	blocks   int                      // hashes kept
}

type tokensKey struct {
	first *uint32
	n     int
}

// Bounds of the memo: slices remembered, and block hashes kept.
const (
	memoSlices = 1 << 16
	memoBlocks = 1 << 18
)

// lookup returns the kept hashes of tokens in blocks of blockSize, or nil
// when tokens are not (yet) worth keeping: the caller hashes them itself.
// Only a memo made with enable answers.
func (m *hashMemo) lookup(tokens []uint32, blockSize int) *kv.Hashes {
	if m.byTokens == nil || len(tokens) == 0 || blockSize <= 0 {
		return nil
	}
	key := tokensKey{&tokens[0], len(tokens)}
	hs, seen := m.byTokens[key]
	switch {
	case hs != nil:
		return hs
	case !seen:
		if len(m.byTokens) < memoSlices {
			m.byTokens[key] = nil
		}
		return nil
	case m.blocks+len(tokens)/blockSize > memoBlocks:
		return nil
	}
	hs = &kv.Hashes{BlockSize: blockSize}
	hs.Locals, hs.Seqs = kv.BlockHashes(tokens, blockSize, nil, nil)
	m.blocks += len(hs.Seqs)
	m.byTokens[key] = hs
	return hs
}

// retiring recycles storage that the loop's inputs read: a request's
// record, whose machine holds the Submit and Reserve it hands its workers
// (handoff.Action), and its prompt: the tokens the loop generates for a
// request that names only a prompt size, and the prompt's hashes, which
// the loop computes once per request at arrival for the router and both
// workers (each would otherwise hash the prompt again). A worker reads
// a Submit or Reserve, and copies what it keeps of the tokens, when the
// input fires, and reads the hashes for as long as it knows the request.
// A request ends only once its workers are done with it, or as the loop
// queues the input that makes them forget it; the loop schedules inputs
// at its now, so that input, or one carrying the prompt, may still be
// queued at the instant the request ends, never later: storage retired
// at retiredAt is reused only once the clock has passed it.
type retiring[T any] struct {
	spare     spare.List[T]
	retired   []*T
	retiredAt float64
}

// promptBuf is one request's prompt storage.
type promptBuf struct {
	hashes kv.Hashes
	tokens []uint32
}

// reset empties b, keeping its room.
func (b *promptBuf) reset() {
	b.hashes.Locals, b.hashes.Seqs, b.tokens = b.hashes.Locals[:0], b.hashes.Seqs[:0], b.tokens[:0]
}

// take returns storage retired before modeled time now, or new storage.
func (s *retiring[T]) take(now float64) *T {
	s.settle(now)
	if x := s.spare.Take(); x != nil {
		return x
	}
	return new(T)
}

// retire gives back storage its request is done with at now.
func (s *retiring[T]) retire(now float64, x *T) {
	s.settle(now)
	s.retired = append(s.retired, x)
	s.retiredAt = now
}

// settle makes spare what was retired before now.
func (s *retiring[T]) settle(now float64) {
	if now > s.retiredAt && len(s.retired) > 0 {
		for _, x := range s.retired {
			s.spare.Put(x)
		}
		clear(s.retired)
		s.retired = s.retired[:0]
	}
}

func (r *request) side(w *workerNode) handoff.Side {
	if w == r.prefill {
		return handoff.Prefill
	}
	return handoff.Decode
}

// errClosed is the Result.Error of requests cut short by Close.
const errClosed = "cluster closed"

// Generate runs one request to its end and returns how it ended. It blocks
// until then, is safe for concurrent use, never panics and always returns
// exactly one Result: bad input is Outcome "error" naming the field; a
// cancelled ctx or Close is Outcome "error" after the request's KV has been
// released on every worker. The request arrives at the loop's modeled now.
//
// The lifecycle is package handoff's: aggregated, source-first (vLLM,
// SGLang with optimistic_prefill) or destination-first (SGLang). A Result
// whose prefill held KV always carries the hold's final outcome and
// duration.
func (c *Cluster) Generate(ctx context.Context, req Request) Result {
	if err := req.validate(); err != nil {
		return Result{Outcome: OutcomeError, Error: err.Error()}
	}
	if c.stepped != nil {
		return c.generateStepped(ctx, req)
	}
	h := &call{req: req, reply: make(chan Result, 1)}
	if !c.send(arriveMsg{h: h}) {
		return Result{Outcome: OutcomeError, Error: errClosed}
	}
	return c.await(ctx, h)
}

func (c *Cluster) await(ctx context.Context, h *call) Result {
	select {
	case res := <-h.reply:
		return res
	case <-c.done:
		return c.lateReply(h)
	case <-ctx.Done():
	}
	if !c.send(stopMsg{h: h, reason: ctx.Err().Error()}) {
		return c.lateReply(h)
	}
	select {
	case res := <-h.reply:
		return res
	case <-c.done:
		return c.lateReply(h)
	}
}

// lateReply is the result of a call whose loop ended: its reply if the
// loop gave one, else "cluster closed".
func (c *Cluster) lateReply(h *call) Result {
	select {
	case res := <-h.reply:
		return res
	default:
		return Result{Outcome: OutcomeError, Error: errClosed}
	}
}

// tooLong says why a prompt is longer than any worker it could go to can
// hold, "" when it is not: checked before any token is drawn, so an
// oversized prompt costs nothing. The engine refuses the borderline ones.
func (c *Cluster) tooLong(req Request) string {
	n := req.PromptTokens
	if len(req.Tokens) > 0 {
		n = len(req.Tokens)
	}
	if n <= c.maxPrompt {
		return ""
	}
	return fmt.Sprintf("prompt of %d tokens is longer than any %s worker holds (%d tokens: num_gpu_blocks × block_size, or max_model_len)",
		n, c.res.pools[0].role, c.maxPrompt)
}

// endedBeforeArrival answers h, and says so, when its caller stopped it
// or the cluster is stopping before the loop took it in.
func (c *Cluster) endedBeforeArrival(h *call) bool {
	switch {
	case h.stopReason != "":
		c.answer(h, Result{Outcome: OutcomeError, Error: h.stopReason})
	case c.stopping:
		c.answer(h, Result{Outcome: OutcomeError, Error: errClosed})
	default:
		return false
	}
	return true
}

// arrive starts a request on the loop at its modeled time: route it, build
// its machine and start it.
func (c *Cluster) arrive(h *call) {
	if c.endedBeforeArrival(h) {
		return
	}
	c.nextID++
	id := c.nextID
	c.stats.requests++
	if h.req.OnToken != nil {
		c.listening = true
	}
	if msg := c.tooLong(h.req); msg != "" {
		res := Result{Outcome: OutcomeRejected, Error: msg}
		c.count(&res)
		c.series.ended(c.v.Now(), &res)
		c.answer(h, res)
		return
	}
	var buf *promptBuf // the request's own prompt storage, if it needs any
	var prefix *prefixEntry
	bs := c.res.router.BlockSize // every pool's block size
	tokens, skip := h.req.Tokens, 0
	if !c.opts.shareTokens || len(tokens) == 0 {
		buf = c.prompts.take(c.v.Now())
		if skip = c.skippable(h); skip > 0 {
			buf.tokens = append(buf.tokens[:0], tokens[skip:]...)
		} else {
			buf.tokens, prefix = c.prefixes.prompt(buf.tokens[:0], h.req, c.cfg.Seed, id, bs)
		}
		tokens = buf.tokens
	}
	prompt := skip + len(tokens)
	r := c.newRequest()
	*r = request{id: id, h: h}
	h.r = r
	hs := c.hashMemo.lookup(h.req.Tokens, bs)
	if hs == nil {
		if buf == nil {
			buf = c.prompts.take(c.v.Now())
		}
		hs = &buf.hashes
		hs.BlockSize = bs
		if given := h.req.Hashes; len(h.req.Tokens) > 0 && given.Covers(prompt, bs) {
			hs.Locals, hs.Seqs = append(hs.Locals, given.Locals...), append(hs.Seqs, given.Seqs...)
		} else {
			if prefix != nil {
				hs.Locals, hs.Seqs = append(hs.Locals, prefix.locals...), append(hs.Seqs, prefix.seqs...)
			}
			hs.Locals, hs.Seqs = c.runMemo.Extend(tokens, bs, hs.Locals, hs.Seqs)
		}
	}
	r.prompt = buf
	rreq := &router.Request{ID: c.names.name(id), Tokens: tokens, LocalHashes: hs.Locals, SeqHashes: hs.Seqs, PromptTokens: prompt}
	spec := handoff.Spec{Request: engine.Request{ID: id, Tokens: tokens, Skip: skip, MaxTokens: h.req.MaxTokens, Hashes: hs}}
	switch {
	case h.pd != nil:
		c.placeOn(r, h, tokens, &spec)
	case !c.cfg.Disagg:
		wid, lease, err := c.router.RouteLease(rreq)
		if err != nil {
			c.refuse(r, err)
			return
		}
		r.prefill = c.workers[wid]
		r.decode = r.prefill
		r.lease = lease
		spec.Order = handoff.Aggregated
	default:
		pid, did, lease, err := c.router.RouteDisaggLease(rreq)
		if err != nil {
			c.refuse(r, err)
			return
		}
		r.prefill, r.decode = c.workers[pid], c.workers[did]
		r.lease = lease
		spec.Order = handoff.SourceFirst
		if c.destFirst {
			spec.Order = handoff.DestinationFirst
		}
	}
	p := r.prefill
	spec.PrefillName, spec.DecodeName = p.label(), r.decode.label()
	spec.TransferMode = p.args.KVTransferTimingMode
	spec.SessionTimeoutMs = p.args.HandoffSessionTimeoutMs
	if h.spare {
		// Nothing reads a call of RunVirtual's again: it takes no stop, no
		// hold and no context, and a long queue of requests then holds no
		// call each.
		r.h, h.r = nil, nil
		r.batch, r.index = h.batch, h.index
		c.keepCall(h)
	}
	r.routed = true
	r.machine.Init(spec)
	c.reqs.Set(id, r)
	c.active++
	c.step(r, handoff.Start{})
}

// refuse ends a request the router would not place.
func (c *Cluster) refuse(r *request, err error) {
	res := routeRefusal(err)
	c.count(&res)
	c.series.ended(c.v.Now(), &res)
	c.reply(r, res)
}

// stopRequest is the caller giving up on r.
func (c *Cluster) stopRequest(r *request, reason string) {
	if r.routed && !r.machine.Finished() {
		c.step(r, handoff.Stop{Reason: reason})
	}
}

// step feeds one event to r's machine and carries out its actions.
//
// The actions go in c.acts, one slice for every machine, used as a stack:
// an action may step a machine in turn (a link that answers at once),
// whose actions go above these and are gone when it returns.
func (c *Cluster) step(r *request, ev handoff.Event) {
	start := len(c.acts)
	r.machine.Step(ev, &c.acts)
	for i := start; i < len(c.acts); i++ {
		a := c.acts[i]
		c.act(r, &a)
	}
	clear(c.acts[start:])
	c.acts = c.acts[:start]
}

func (c *Cluster) act(r *request, a *handoff.Action) {
	switch a.Kind {
	case handoff.Apply:
		w := r.prefill
		if a.Side == handoff.Decode {
			w = r.decode
		}
		w.handle.Apply(a.Input)
	case handoff.OpenRoom:
		c.link.open(r)
	case handoff.Connect:
		c.connect(r)
	case handoff.CloseRoom:
		c.closeRoom(r, a.Transferred)
	case handoff.Finish:
		c.finish(r, a.Phase, a.Error)
	case handoff.HandOut:
		c.handOut(r)
	}
}

// finish ends r in phase, err saying why when it did not complete: its
// result to the caller, its counts, the router freed.
func (c *Cluster) finish(r *request, phase handoff.Phase, err string) {
	res := Result{PrefillWorker: r.prefill.name, DecodeWorker: r.decode.name, PrefillDPRank: r.prefill.rank, DecodeDPRank: r.decode.rank}
	res.Outcome = outcomeOf(phase)
	res.Error = err
	rec := r.machine.Record()
	if res.Outcome == OutcomeCompleted {
		res.Error = ""
		markTruncated(&res, r.decode, rec)
	}
	res = c.fill(res, r)
	if r.pd != nil {
		c.endSplit(r, &res)
	}
	c.count(&res)
	c.series.ended(c.v.Now(), &res)
	c.reqs.Delete(r.id)
	if r.tid != 0 {
		c.link.forget(r)
	}
	c.router.FreeLease(r.lease)
	c.active--
	c.reply(r, res)
}

// skippable is how many of h's prompt tokens the cluster need not keep
// (engine.Request.Skip): those of the complete blocks whose hashes h's
// request carries (every pool hashes blocks of the router's size), when
// no worker reads them. Workers reporting the token ids of the blocks
// they store (for a KV-events listener), remote workers and a placed
// call get every token.
func (c *Cluster) skippable(h *call) int {
	bs := c.res.router.BlockSize
	if h.pd != nil || c.remote != nil || c.cfg.OnKVEvents != nil || !h.req.Hashes.Covers(len(h.req.Tokens), bs) {
		return 0
	}
	return len(h.req.Hashes.Seqs) * bs
}

func (c *Cluster) reply(r *request, res Result) {
	if r.prompt != nil {
		if c.remote == nil { // a remote worker may send the tokens again later
			r.prompt.reset()
			c.prompts.retire(c.v.Now(), r.prompt)
		}
		r.prompt = nil
	}
	h := r.h
	if h != nil {
		c.unwatch(h)
		if h.wantPause && c.paced != nil && !c.stopping {
			h.pause = c.paced.take()
		}
	}
	// A caller that reads Now after its result sees at least the result's
	// instant, even when a paced loop runs ahead of the wall clock.
	c.nowBits.Store(math.Float64bits(c.v.Now()))
	if h == nil {
		b, i := r.batch, r.index
		c.recycle(r)
		b.put(i, res)
		return
	}
	h.r = nil // a late stop finds nothing to stop
	c.recycle(r)
	c.answer(h, res)
}

// answer delivers h's result, and keeps h for a later arrival when it is
// the loop's own.
func (c *Cluster) answer(h *call, res Result) {
	h.deliver(res)
	if h.spare {
		c.keepCall(h)
	}
}

// newRequest returns a record for an arriving request: an ended one's
// when there is one.
func (c *Cluster) newRequest() *request { return c.spareReqs.take(c.v.Now()) }

// recycle keeps the record of a request that just ended for a later
// arrival, once the clock has passed this instant (retiring): its
// machine's Submit or Reserve may still be queued until then. Nothing
// that outlives a request may recognise it by its record alone: whatever
// reaches a request later (a link reply, a stop) looks it up by its id,
// which is never reused, in c.reqs or through its call. A
// remote cluster's link replies still carry records (onRemoteLink), so
// its records are left to the collector.
func (c *Cluster) recycle(r *request) {
	if c.remote != nil || c.opts.fresh {
		return
	}
	c.spareReqs.retire(c.v.Now(), r)
}

func outcomeOf(p handoff.Phase) string {
	switch p {
	case handoff.Completed:
		return OutcomeCompleted
	case handoff.Aborted:
		return OutcomeAborted
	case handoff.Rejected:
		return OutcomeRejected
	}
	return OutcomeError
}

// count folds a finished request into the counters.
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

// onOutput folds one worker Output into the cluster: counters, forensic
// records, the request machines, the router.
func (c *Cluster) onOutput(wi int, out *engine.Output) {
	w := c.workers[wi]
	c.heldNow += out.Metrics.HeldBlocks - w.last.HeldBlocks
	w.last = out.Metrics
	c.stats.peakHeld = max(c.stats.peakHeld, c.heldNow)
	m := &out.Metrics
	c.series.observe(c.v.Now(), c.heldNow, wi, m.HeldBlocks, m.ActiveBlocks, m.FreeBlocks, m.ReservedBlocks, m.Running, m.Waiting)
	// Tokens first: the completion below may end the request and its
	// caller must have heard every token before its result.
	if c.listening {
		c.tellTokens(out.Tokens)
	}

	// A refusal comes with the events it causes (a destination refused is
	// also cancelled): the machine hears the refusal first, so the request
	// ends saying why.
	for _, rej := range out.Rejections {
		if r, _ := c.reqs.Get(rej.RequestID); r != nil {
			c.step(r, handoff.WorkerRejection{Side: r.side(w), Rejection: rej})
		}
	}
	for _, e := range out.Events {
		r, _ := c.reqs.Get(e.RequestID)
		c.record(w, r, e)
		if r != nil {
			c.step(r, handoff.WorkerEvent{Side: r.side(w), Event: e})
		}
	}
	for _, comp := range out.Completions {
		r, _ := c.reqs.Get(comp.RequestID)
		if r == nil {
			continue
		}
		if w.role == engine.WorkerPrefill {
			c.router.PrefillDoneLease(r.lease)
		}
		c.step(r, handoff.WorkerCompletion{Side: r.side(w), Completion: comp})
	}
	if w.role == engine.WorkerAggregated {
		for _, tok := range out.Tokens {
			if tok.Index == 0 {
				if r, _ := c.reqs.Get(tok.RequestID); r != nil {
					c.router.PrefillDoneLease(r.lease)
				}
			}
		}
	}
	for _, ev := range out.KVEvents {
		ev.DPRank = uint32(w.rank) // each rank's engine numbers its own events
		if c.opts.kvTap != nil {
			c.opts.kvTap(w.id, ev)
		}
		// A viewed worker's view answers for its GPU pool, not for the
		// tiers below it, whose events the router indexes.
		if !w.viewed || ev.Medium != kv.MediumGPU {
			c.router.KVEvent(w.id, ev)
		}
	}
	if c.cfg.OnKVEvents != nil && len(out.KVEvents) > 0 {
		c.cfg.OnKVEvents(KVPass{Worker: wi, DPRank: w.rank, AtMs: c.v.Now(), Events: out.KVEvents, Tokens: out.KVTokens})
	}
	load := router.Load{
		ActiveBlocks:       m.ActiveBlocks,
		RouterActiveBlocks: m.RouterActiveBlocks,
		TotalBlocks:        m.TotalBlocks,
		Running:            m.Running,
		Waiting:            m.Waiting,
	}
	if c.res.busy {
		load.RouterActiveBlocks = m.ActiveBlocks
	}
	c.router.UpdateLoad(w.id, load)
}

// onInput tells a request's machine what an input it asked for did.
func (c *Cluster) onInput(ir engine.InputResult) {
	id := inputID(ir.Input)
	r, _ := c.reqs.Get(id)
	if r == nil {
		return
	}
	c.step(r, handoff.InputReply{Side: r.side(c.workers[ir.Worker]), Input: ir.Input, Reply: ir.Reply})
}

func inputID(in engine.Input) uint64 {
	switch in := in.(type) {
	case *engine.Submit:
		return in.Request.ID
	case *engine.Reserve:
		return in.Request.ID
	case engine.ReleaseHeld:
		return in.ID
	case engine.Cancel:
		return in.ID
	case engine.StartTransfer:
		return in.ID
	case engine.Activate:
		return in.ID
	case engine.CancelDestination:
		return in.ID
	case engine.DestinationReady:
		return in.ID
	}
	return 0
}

// record keeps the counters and the forensic log of one lifecycle event.
func (c *Cluster) record(w *workerNode, r *request, e engine.Event) {
	decodeName, prefillName := "", ""
	decodeRank, prefillRank := 0, 0
	var tid uint64
	if r != nil {
		decodeName, prefillName, tid = r.decode.name, r.prefill.name, r.tid
		decodeRank, prefillRank = r.decode.rank, r.prefill.rank
		if r.pd != nil && !r.pd.claimed {
			decodeName, decodeRank = "", 0 // no decode named yet
		}
	}
	switch e.Kind {
	case engine.EventHoldStarted:
		c.stats.pins++
		h := Hold{RequestID: e.RequestID, PrefillWorker: w.name, DecodeWorker: decodeName, Blocks: e.Blocks, StartMs: e.At,
			PrefillDPRank: w.rank, DecodeDPRank: decodeRank}
		if r != nil {
			c.nextTID++
			r.tid = c.nextTID
			h.TransferID = r.tid
			if r.pd != nil {
				r.pd.blocks = e.Blocks
			}
		}
		c.forensic.holdStarted(h)
	case engine.EventHoldReleased:
		outcome := holdOutcome(e)
		switch {
		case e.Outcome == engine.Transferred:
			c.stats.holdsReleased++
			c.stats.transfersDone++
		case outcome == HoldCancelled:
			c.stats.holdsCancelled++
		default:
			c.stats.holdsAborted++
			c.series.holdAborted(e.At)
		}
		c.stats.holdMsTotal += e.DurationMs
		c.stats.holdMsMax = max(c.stats.holdMsMax, e.DurationMs)
		h, ok := c.forensic.holdEnded(e.RequestID, e.At, e.DurationMs, outcome, e.Outcome == engine.Transferred)
		if e.Outcome != engine.Transferred && ok && h.Claimed {
			c.stats.transfersLost++
		}
	case engine.EventTransferStart:
		c.stats.transfersStarted++
		c.forensic.transferStarted(e.RequestID, e.At)
	case engine.EventDecodeWaitStart:
		if r != nil {
			c.forensic.record(Event{Name: EventDecodeWait, AtMs: e.At, RequestID: e.RequestID, TransferID: tid,
				PrefillWorker: prefillName, DecodeWorker: w.name, PrefillDPRank: prefillRank, DecodeDPRank: w.rank})
		}
	case engine.EventDecodeReserved:
		if r != nil {
			c.forensic.record(Event{Name: EventDecodeReserved, AtMs: e.At, RequestID: e.RequestID, TransferID: tid,
				PrefillWorker: prefillName, DecodeWorker: w.name, PrefillDPRank: prefillRank, DecodeDPRank: w.rank,
				MissingTokens: e.MissingTokens, WaitMs: e.DurationMs})
		}
	}
}

// Hold outcomes as the forensic log and results name them.
const (
	HoldTransferred = "transferred"
	HoldAborted     = "aborted"   // ended by its abort or session deadline
	HoldCancelled   = "cancelled" // given up: the request was refused, withdrawn or cut short
)

func holdOutcome(e engine.Event) string {
	switch {
	case e.Outcome == engine.Transferred:
		return HoldTransferred
	case e.Reason == engine.EndAbortTimeout || e.Reason == engine.EndSessionTimeout:
		return HoldAborted
	default:
		return HoldCancelled
	}
}

// sortedRequests lists the requests in flight by id, for a deterministic
// order.
func (c *Cluster) sortedRequests() []*request {
	out := make([]*request, 0, c.reqs.Len())
	for _, r := range c.reqs.All() {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *request) int { return cmp.Compare(a.id, b.id) })
	return out
}

// markTruncated flags a completion that stopped short of max_tokens
// because its sequence hit a length limit on w, and says which: it is
// still "completed", but its output is shorter than asked.
func markTruncated(res *Result, w *workerNode, rec *handoff.Record) {
	if !rec.Truncated {
		return
	}
	res.Truncated = true
	seq := int(rec.PromptTokens) + int(rec.OutputTokens)
	if m := w.args.MaxModelLen; m != nil && seq >= *m {
		res.Error = fmt.Sprintf("output truncated at %d tokens: the sequence (%d tokens) reached %s's max_model_len %d",
			rec.OutputTokens, seq, w.label(), *m)
		return
	}
	res.Error = fmt.Sprintf("output truncated at %d tokens: the sequence outgrew %s's KV pool (%d tokens: num_gpu_blocks %d × block_size %d)",
		rec.OutputTokens, w.label(), w.args.NumGPUBlocks*w.args.BlockSize, w.args.NumGPUBlocks, w.args.BlockSize)
}

// fill adds what the request's machine knows to res: timings, the hold and
// the handoff.
func (c *Cluster) fill(res Result, r *request) Result {
	s := r.machine.Record()
	res.TransferID = r.tid
	res.CachedTokens = int(s.CachedTokens)
	if s.Held {
		res.HoldStarted = true
		if s.HoldEnded {
			res.HoldOutcome = holdOutcome(engine.Event{Outcome: s.HoldOutcome, Reason: s.HoldReason})
			res.HoldMs = s.HoldMs
			if s.Claimed {
				res.TransferMs = s.TransferMs
			}
		}
	}
	switch {
	case s.Reserved:
		res.DecodeWaitMs = s.ReservedAt - s.WaitStart
		if s.DecodeWaitMs > 0 {
			res.DecodeWaitMs = s.DecodeWaitMs
		}
	case s.WaitSeen && s.HoldEnded && s.HoldOutcome == engine.Aborted:
		// The decode never got a reservation: it waited in vain from the
		// start of its wait until the source gave the hold up.
		res.DecodeWaitMs = max(0, s.HoldEnd-s.WaitStart)
	}
	// The request arrived when its first worker got it: the prefill
	// source-first, the decode destination-first, whose wait for a
	// reservation is then part of the time to first token.
	arrival := s.Arrival
	if s.WaitSeen && s.WaitStart < arrival {
		arrival = s.WaitStart
	}
	if s.PrefillDone {
		res.OutputTokens = 1
		res.TTFTMs = s.FirstTokenAt - arrival
		res.QueueMs = max(0, s.Arrival+s.QueueMs-arrival)
	}
	if s.Done {
		res.OutputTokens = int(s.OutputTokens)
		c.timings(&res, arrival, s.FirstTokenAt, s.DoneAt)
	}
	if res.Error == "" && res.Outcome != OutcomeCompleted {
		res.Error = r.machine.Phase().String()
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
	c.stats.causality++
	if c.stats.causalityExample == "" {
		c.stats.causalityExample = fmt.Sprintf("arrival %.3f, first token %.3f, last token %.3f (prefill %s, decode %s)",
			arrival, first, last, res.PrefillWorker, res.DecodeWorker)
	}
}

// routeRefusal turns a routing error into the Result: a busy refusal is
// "rejected" with the router's message naming the saturated pool, and
// PrefillRejected when that pool is the prefill one (or the aggregated
// one): the cascade's refusals. The role comes with the error, so it is
// the one the router saw.
func routeRefusal(err error) Result {
	var busy *router.BusyError
	if errors.As(err, &busy) {
		return Result{Outcome: OutcomeRejected, Error: busy.Error(), PrefillRejected: busy.Role != router.RoleDecode}
	}
	return Result{Outcome: OutcomeError, Error: err.Error()}
}
