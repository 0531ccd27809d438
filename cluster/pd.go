package cluster

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/handoff"
)

// This file is the cluster's API for callers that pick workers themselves
// (an outside router in front of per-worker endpoints): a request placed
// to one worker rank (GenerateOn), and the two halves of a disaggregated
// request driven separately, as vLLM's P/D over HTTP drives them: Prefill
// runs the prompt on a prefill worker and returns, with the KV held, the
// params of its transfer (Handout); Decode takes those params to a decode
// worker, which reserves, pulls the KV over the prefill's transfer server
// and generates. Both halves are one request on one handoff machine
// (handoff.Spec.DecodeLater), so the hold, its abort deadline, the
// transfer and the metrics are those of any handoff.

// Target names one worker rank, as Stats lists them: the worker's name
// ("worker-0", "prefill-1") and its data-parallel rank (0 for a worker of
// one rank).
type Target struct {
	Worker string
	DPRank int
}

func (t Target) String() string {
	if t.DPRank == 0 {
		return t.Worker
	}
	return fmt.Sprintf("%s dp_rank %d", t.Worker, t.DPRank)
}

// Handout is what a Prefill returns once its prefill worker holds the
// prompt's KV: where and how a decode takes it over (the transfer server's
// advertised host and port, the transfer id, and the token the server
// checks), and the prefill half's own figures.
type Handout struct {
	TransferID uint64
	Host       string
	Port       int
	Token      bootstrap.Token
	// Blocks is how many KV blocks the prefill holds for the transfer.
	Blocks int
	// Source is the prefill worker rank that holds them.
	Source Target
	// Result is the prefill half: Outcome "completed", its one token, its
	// TTFTMs and CachedTokens, PrefillWorker and TransferID.
	Result Result
}

// Claim is what a Decode presents: the fields of a Handout that say where
// the KV is and prove the caller was given it.
type Claim struct {
	TransferID uint64
	Host       string
	Port       int
	Token      bootstrap.Token
}

// ClaimCode says why a Decode's claim was refused.
type ClaimCode uint8

// Why a claim is refused.
const (
	// ClaimUnknown: no transfer with that id is held, nor was lately.
	ClaimUnknown ClaimCode = iota + 1
	// ClaimForged: the transfer is held, but the token, host or port are
	// not those it was handed out with.
	ClaimForged
	// ClaimSpent: the transfer was already claimed by a decode.
	ClaimSpent
	// ClaimExpired: the hold ended (its abort or session deadline, or the
	// prefill's caller gave it up) before this claim came.
	ClaimExpired
	// ClaimMismatch: the decode's prompt is not the one prefilled.
	ClaimMismatch
)

// ClaimError is a Decode refused before anything was applied: the held KV,
// if any, is untouched, and its rightful decode may still claim it.
type ClaimError struct {
	Code       ClaimCode
	TransferID uint64
	Msg        string
}

func (e *ClaimError) Error() string { return e.Msg }

// ErrPlaced says a cluster cannot run placed or split requests: they need
// the in-process cluster paced against the wall clock, with its
// transfer servers.
var ErrPlaced = errors.New("requests placed on a worker need an in-process cluster with transfer servers (not stepped, not remote)")

// pdCall is what a placed call adds to its call.
type pdCall struct {
	pin     *workerNode
	split   bool         // a Prefill: hand the transfer out
	handout chan Handout // where the Handout goes (buffered)
	claim   *Claim       // a Decode's claim
	err     *ClaimError  // set on the loop before a refused claim's result
}

// pdReq is what a split request keeps besides its record.
type pdReq struct {
	tokens  []uint32 // the prompt, for a claim to match
	blocks  int      // blocks held
	claimed bool
	addr    string // the claim's transfer server
	token   bootstrap.Token
}

// claimMsg is a Decode's claim for the loop.
type claimMsg struct{ h *call }

func (claimMsg) isMessage() {}

// spentLog remembers, for a while, the transfers that were handed out and
// are no longer claimable, with what a late claim should be told: a
// reused or expired one is then told so rather than "unknown".
type spentLog struct {
	byID map[uint64]*ClaimError
	ring []uint64
	next int
}

// spentKept bounds the spent log.
const spentKept = 4096

func (l *spentLog) add(e *ClaimError) {
	if l.byID == nil {
		l.byID = make(map[uint64]*ClaimError)
	}
	if _, ok := l.byID[e.TransferID]; !ok {
		if len(l.ring) < spentKept {
			l.ring = append(l.ring, e.TransferID)
		} else {
			delete(l.byID, l.ring[l.next])
			l.ring[l.next] = e.TransferID
			l.next = (l.next + 1) % spentKept
		}
	}
	l.byID[e.TransferID] = e
}

// node is the worker rank t names, checked against the role wanted.
func (c *Cluster) node(t Target, role engine.WorkerType) (*workerNode, error) {
	if c.stepped != nil || c.remote != nil {
		return nil, ErrPlaced
	}
	for _, n := range c.workers {
		if n.name == t.Worker && n.rank == t.DPRank {
			if n.role != role {
				return nil, fmt.Errorf("%s is a %s worker, not a %s one", t, n.role, role)
			}
			return n, nil
		}
	}
	return nil, fmt.Errorf("no worker %s in the cluster", t)
}

// Targets lists the cluster's worker ranks in the order Stats lists them,
// with each one's role ("aggregated", "prefill" or "decode").
func (c *Cluster) Targets() (ts []Target, roles []string) {
	for _, n := range c.workers {
		ts = append(ts, Target{Worker: n.name, DPRank: n.rank})
		roles = append(roles, string(n.role))
	}
	return ts, roles
}

// GenerateOn is Generate on the aggregated worker rank t, which runs the
// whole request: the router does not place it (its KV still shows in the
// router's view of that worker).
func (c *Cluster) GenerateOn(ctx context.Context, t Target, req Request) Result {
	if err := req.validate(); err != nil {
		return Result{Outcome: OutcomeError, Error: err.Error()}
	}
	n, err := c.node(t, engine.WorkerAggregated)
	if err != nil {
		return Result{Outcome: OutcomeError, Error: err.Error()}
	}
	h := &call{req: req, reply: make(chan Result, 1), pd: &pdCall{pin: n}}
	if !c.send(arriveMsg{h: h}) {
		return Result{Outcome: OutcomeError, Error: errClosed}
	}
	return c.await(ctx, h)
}

// Prefill runs req's prefill on the prefill worker rank t and returns once
// the worker holds the prompt's KV and its first token is out, with the
// transfer's params (Handout); ok is false when the request ended before
// that, and the Result says how. The hold then waits for a Decode with
// those params; its abort clock runs from the hold's start, and a hold no
// Decode claims ends at kv_transfer_abort_timeout_ms (or
// handoff_session_timeout_ms), freeing the KV and counting an abort. ctx
// bounds the wait for the handout only: once handed out, the hold is the
// decode's to claim.
func (c *Cluster) Prefill(ctx context.Context, t Target, req Request) (ho Handout, ok bool, res Result) {
	if err := req.validate(); err != nil {
		return Handout{}, false, Result{Outcome: OutcomeError, Error: err.Error()}
	}
	n, err := c.node(t, engine.WorkerPrefill)
	switch {
	case err != nil:
	case n.server == nil:
		err = ErrPlaced
	case c.destFirst:
		err = errors.New("this cluster's decode reserves before its prefill computes (sglang without sglang.optimistic_prefill); a prefill handed out for a remote decode needs the source-first order: set sglang.optimistic_prefill, or use engine vllm")
	}
	if err != nil {
		return Handout{}, false, Result{Outcome: OutcomeError, Error: err.Error()}
	}
	h := &call{req: req, reply: make(chan Result, 1), pd: &pdCall{pin: n, split: true, handout: make(chan Handout, 1)}}
	if !c.send(arriveMsg{h: h}) {
		return Handout{}, false, Result{Outcome: OutcomeError, Error: errClosed}
	}
	select {
	case ho := <-h.pd.handout:
		return ho, true, ho.Result
	case res := <-h.reply:
		return Handout{}, false, res
	case <-c.done:
		return Handout{}, false, c.lateReply(h)
	case <-ctx.Done():
	}
	// Given up before the handout: the request is stopped, a hold it
	// already took included.
	if !c.send(stopMsg{h: h, reason: ctx.Err().Error()}) {
		return Handout{}, false, c.lateReply(h)
	}
	select {
	case res := <-h.reply:
		return Handout{}, false, res
	case <-c.done:
		return Handout{}, false, c.lateReply(h)
	}
}

// Decode claims the transfer a Prefill handed out and finishes the request
// on the decode worker rank t: the worker reserves room for it through its
// scheduler, connects to the prefill's transfer server with the claim's
// token, takes the KV once the modeled transfer is done, and generates
// req.MaxTokens tokens. req's prompt must be the one prefilled. The Result
// is the whole request's, prompt and cache figures included.
//
// A claim that names no transfer held, a spent or expired one, a token,
// host or port other than those handed out, or another prompt is refused
// before anything is applied, with a *ClaimError (the Result then says
// the same as an error).
func (c *Cluster) Decode(ctx context.Context, t Target, cl Claim, req Request) (Result, error) {
	if err := req.validate(); err != nil {
		return Result{Outcome: OutcomeError, Error: err.Error()}, nil
	}
	n, err := c.node(t, engine.WorkerDecode)
	if err != nil {
		return Result{Outcome: OutcomeError, Error: err.Error()}, nil
	}
	h := &call{req: req, reply: make(chan Result, 1), pd: &pdCall{pin: n, claim: &cl}}
	if !c.send(claimMsg{h: h}) {
		return Result{Outcome: OutcomeError, Error: errClosed}, nil
	}
	res := c.await(ctx, h)
	if e := h.pd.err; e != nil {
		return res, e
	}
	return res, nil
}

// acceptClaim schedules a claim at the loop's now.
func (c *Cluster) acceptClaim(h *call) {
	if c.stopping {
		h.deliver(Result{Outcome: OutcomeError, Error: errClosed})
		return
	}
	c.v.Call(c.stamp(), func() { c.claim(h) })
}

// claim checks a Decode's claim against the transfers handed out and, if
// it holds, names the decode on the request's machine.
func (c *Cluster) claim(h *call) {
	if c.endedBeforeArrival(h) {
		return
	}
	cl := h.pd.claim
	tid := cl.TransferID
	refuse := func(e *ClaimError) {
		h.pd.err = e
		c.answer(h, Result{Outcome: OutcomeError, Error: e.Msg})
	}
	r := c.parked[tid]
	if r == nil {
		if e := c.spent.byID[tid]; e != nil {
			refuse(e)
			return
		}
		refuse(&ClaimError{Code: ClaimUnknown, TransferID: tid, Msg: fmt.Sprintf(
			"transfer %d: no prefill holds KV for it: the id was never handed out, or ended long ago", tid)})
		return
	}
	p := r.prefill
	if cl.Host != p.server.AdvertisedHost() || cl.Port != p.server.Port() {
		refuse(&ClaimError{Code: ClaimForged, TransferID: tid, Msg: fmt.Sprintf(
			"transfer %d is not held at %s: its KV is on %s's transfer server", tid,
			net.JoinHostPort(cl.Host, strconv.Itoa(cl.Port)), p.label())})
		return
	}
	want := p.server.Token(tid, r.id)
	if !hmac.Equal(want[:], cl.Token[:]) {
		refuse(&ClaimError{Code: ClaimForged, TransferID: tid, Msg: fmt.Sprintf(
			"transfer %d: the token is not the one its prefill handed out", tid)})
		return
	}
	if same := slices.Equal(h.req.Tokens, r.pd.tokens) || (len(h.req.Tokens) == 0 && h.req.PromptTokens == len(r.pd.tokens)); !same {
		n := len(h.req.Tokens)
		if n == 0 {
			n = h.req.PromptTokens
		}
		refuse(&ClaimError{Code: ClaimMismatch, TransferID: tid, Msg: fmt.Sprintf(
			"transfer %d: the prompt (%d tokens) is not the one prefilled (%d tokens): send the decode the prefill's prompt", tid, n, len(r.pd.tokens))})
		return
	}
	if !r.machine.Claimable() {
		refuse(&ClaimError{Code: ClaimExpired, TransferID: tid, Msg: fmt.Sprintf(
			"transfer %d: the hold on %s ended before this claim", tid, p.label())})
		return
	}
	dn := h.pd.pin
	delete(c.parked, tid)
	c.spent.add(&ClaimError{Code: ClaimSpent, TransferID: tid, Msg: fmt.Sprintf(
		"transfer %d was already claimed by %s: params are good for one decode", tid, dn.label())})
	r.decode = dn
	r.pd.claimed = true
	c.forensic.named(r.id, dn.name, dn.rank)
	r.pd.addr = net.JoinHostPort(cl.Host, strconv.Itoa(cl.Port))
	r.pd.token = cl.Token
	// The request's result is the decode's caller's from now on (the
	// prefill's caller has its handout).
	r.h, h.r = h, r
	if h.req.OnToken != nil {
		c.listening = true
	}
	c.step(r, handoff.Claim{DecodeName: dn.label(), MaxTokens: h.req.MaxTokens})
}

// placeOn places a placed call's request on its worker: aggregated, or
// a split request's prefill, whose decode a claim names later.
func (c *Cluster) placeOn(r *request, h *call, tokens []uint32, spec *handoff.Spec) {
	n := h.pd.pin
	r.prefill, r.decode = n, n
	spec.Order = handoff.Aggregated
	if h.pd.split {
		spec.Order = handoff.SourceFirst
		spec.DecodeLater = true
		r.pd = &pdReq{tokens: tokens}
	}
}

// handOut gives a split request's caller its transfer's params, and keeps
// the request for a claim.
func (c *Cluster) handOut(r *request) {
	p := r.prefill
	ho := Handout{TransferID: r.tid, Host: p.server.AdvertisedHost(), Port: p.server.Port(),
		Token: p.server.Token(r.tid, r.id), Blocks: r.pd.blocks, Source: Target{Worker: p.name, DPRank: p.rank}}
	ho.Result = c.fill(Result{Outcome: OutcomeCompleted, PrefillWorker: p.name, PrefillDPRank: p.rank}, r)
	if c.parked == nil {
		c.parked = make(map[uint64]*request)
	}
	c.parked[r.tid] = r
	if h := r.h; h != nil && h.pd != nil && h.pd.handout != nil {
		h.pd.handout <- ho
	}
}

// endSplit forgets a split request that ends: a claim that comes later is
// told why it is too late.
func (c *Cluster) endSplit(r *request, res *Result) {
	if r.pd.claimed {
		return
	}
	res.DecodeWorker, res.DecodeDPRank = "", 0
	if c.parked[r.tid] == r {
		delete(c.parked, r.tid)
		c.spent.add(&ClaimError{Code: ClaimExpired, TransferID: r.tid, Msg: fmt.Sprintf(
			"transfer %d expired: %s", r.tid, res.Error)})
	}
}
