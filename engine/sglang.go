package engine

import (
	"fmt"
	"math"
	"slices"

	"github.com/kvstrand/mocker/internal/idtab"
	"github.com/kvstrand/mocker/internal/spare"
	"github.com/kvstrand/mocker/perf"
)

// SGLang scheduling constants, as Dynamo's mocker (lib/mocker/src/scheduler/sglang) and SGLang set them.
const (
	// sglangInitRatio is the new-token ratio at conservativeness 1: the
	// fraction of each running request's remaining output that admission
	// reserves room for.
	sglangInitRatio = 0.7
	// sglangMinRatioFactor puts the ratio's floor at this fraction of its
	// initial value.
	sglangMinRatioFactor = 0.14
	// sglangDecaySteps is the number of decode passes over which the ratio
	// decays from its initial value to its floor.
	sglangDecaySteps = 600
	// sglangRetractDecodeSteps is the decode steps Dynamo's re-estimate
	// after a retraction credits each running request with.
	sglangRetractDecodeSteps = 20
	// sglangLPMMaxQueue is the longest waiting queue lpm still sorts; a
	// longer one is served FIFO, as matching every entry gets too costly.
	sglangLPMMaxQueue = 128
)

type sgState uint8

const (
	sgWaiting   sgState = iota
	sgBoot              // a destination-first prefill waiting for its decode side
	sgAwaitKV           // a destination queued for admission as a reservation
	sgReserved          // a destination holding pages, awaiting Activate
	sgActivated         // an activated destination waiting for a running slot
	sgRunning
	sgHeld
	sgDone
)

// sgReq is a request inside the SGLang model. Its KV is a locked path in
// the radix tree (the pages shared with the cache) followed by private
// pages not yet inserted. Requests are recycled, slices and all.
type sgReq struct {
	reqCore
	// kvLen counts the tokens whose KV is computed: after a prefill, every
	// token but the last generated one; under dynamo_compat, every token,
	// since a sampled token takes its slot at once (sampleCompat).
	kvLen int
	last  int32   // deepest node of the locked path, noSlot when none
	depth int     // pages on the locked path
	pages []int32 // private pages after the path

	state    sgState
	retracts int
	// admitted is set once the request first got KV; cached is fixed then.
	admitted bool

	// The last prefix match (pages, deepest node) of the first matchLimit
	// pages, taken at the cache's matchVer and matchEvicts; matchVer 0
	// means none. lpm re-sorts the queue every pass, and this keeps a
	// request's match from being walked again while the tree is unchanged,
	// or from the root while nothing was evicted.
	matchPages, matchLimit int
	matchLast              int32
	matchVer, matchEvicts  uint64
	bootSeq                uint64 // names this request's bootstrap queue entry

	// Destination-first handoff: the decode side reserved, so the transfer
	// of transferTokens starts as soon as the prefill holds its KV.
	destReady      bool
	transferTokens int
	growth         int // a reservation's clipped output, reserved in admission
}

// SGLang is the SGLang scheduler model (engine/doc.go, "Two scheduler models"): a
// token pool of num_gpu_blocks pages of block_size tokens under a radix
// cache with lock refs and LRU eviction of unlocked leaves; admission
// against the free and evictable room left after reserving each running
// request's expected growth (the new-token ratio); extend passes that
// prefill newly admitted requests while running ones wait, and decode passes
// over the whole running set; retraction of the request with the fewest
// output tokens when the pool cannot grow.
//
// Occupancy is reported in pages so a cluster treats both engines alike:
// ActiveBlocks are pages some request uses (locked tree pages and private
// pages), InactiveBlocks are evictable tree pages, FreeBlocks the rest.
//
// Of the common args, max_num_seqs caps the running set (unless
// sglang.max_running_requests is set) and enable_chunked_prefill false
// lifts sglang.chunked_prefill_size; max_num_batched_tokens plays no part,
// sglang.max_prefill_tokens being SGLang's per-pass prompt budget. A Hold
// request on a prefill worker is a handoff source, destination-first unless
// sglang.optimistic_prefill (see DestinationReady); elsewhere Hold behaves
// as for vLLM.
type SGLang struct {
	page, total   int // tokens per page, pages in the pool
	maxRunning    int
	maxPrefill    int
	chunkSize     int
	clip          int
	lpm           bool
	caching       bool
	prefillWorker bool
	decodeWorker  bool
	includeHeld   bool
	slotReserve   bool // a reservation takes a running slot (reserve_takes_slot)
	compat        bool // dynamo_compat
	decodeSpeedup float64
	optimistic    bool
	model         perf.Model

	handoffBook

	initRatio, minRatio, ratioDecay, ratio float64

	cache   *radixCache
	tokSeed uint64   // seeds the requests' generated tokens (reqCore.token)
	waiting []*sgReq // a request mid chunked prefill, if any, is first
	running []*sgReq
	// activated are destinations whose KV arrived, waiting for a running
	// slot.
	activated []*sgReq
	byID      idtab.Table[*sgReq]
	spare     spare.List[sgReq]
	arenas    hashArenas // the hash storage of recycled requests
	batch     []*sgReq   // this pass's extend or decode batch

	heldPrivate int // private pages of held requests
	retractions uint64
	oom         bool // the last admission failed to allocate

	// boot is the bootstrap queue of destination-first prefills, in
	// arrival order (so in deadline order); they hold nothing. A request
	// leaving it from the middle (DestinationReady, Cancel) only stops
	// matching its entry, which is dropped when it reaches the head, so
	// leaving costs no scan. bootLive counts the entries still matching.
	boot     []bootEntry
	bootHead int
	bootLive int
	bootSeq  uint64
	// done and expired are outcomes decided outside a pass (an activated
	// destination with nothing to decode, a bootstrap timeout), reported by
	// the next pass.
	done    []Completion
	expired []Rejection
	// reservedGrowth sums the reservations' clipped outputs, which
	// admission sets aside like the running requests' growth.
	reservedGrowth int

	// Extend-pass accumulators.
	sumISL, sumPrefix float64
	prefillToks       int
}

// NewSGLang builds the SGLang model for args, which must be valid
// (Args.Validate; the error is an *ArgError naming the field) with
// engine_type sglang and SGLang knobs whose page_size equals block_size
// (ParseArgs fills them). model nil means perf.Polynomial; seed drives the
// generated token ids.
func NewSGLang(args Args, model perf.Model, seed uint64) (*SGLang, error) {
	if err := args.Validate(); err != nil {
		return nil, err
	}
	if args.EngineType != EngineSGLang {
		return nil, &ArgError{Field: "engine_type", Message: fmt.Sprintf("%q given to the SGLang model; set it to %q or build with New", args.EngineType, EngineSGLang)}
	}
	if args.NumGPUBlocks > math.MaxInt32 {
		return nil, &ArgError{Field: "num_gpu_blocks", Message: fmt.Sprintf("%d exceeds the model's limit of %d", args.NumGPUBlocks, math.MaxInt32)}
	}
	sg := args.SGLang
	model = timingModel(args, model)
	g := &SGLang{
		page:          args.BlockSize,
		total:         args.NumGPUBlocks,
		maxRunning:    args.MaxNumSeqsOrInf(),
		maxPrefill:    sg.MaxPrefillTokens,
		chunkSize:     sg.ChunkedPrefillSize,
		clip:          sg.ClipMaxNewTokens,
		lpm:           sg.SchedulePolicy == SGLangPolicyLPM,
		caching:       args.EnablePrefixCaching,
		prefillWorker: args.WorkerType == WorkerPrefill,
		decodeWorker:  args.WorkerType == WorkerDecode,
		includeHeld:   args.RouterLoadIncludesHeld,
		slotReserve:   args.ReserveTakesSlot,
		compat:        args.DynamoCompat,
		decodeSpeedup: args.DecodeSpeedupRatio,
		optimistic:    sg.OptimisticPrefill,
		model:         model,
		tokSeed:       seed ^ 0x73676c616e67,
	}
	if sg.MaxRunningRequests != nil {
		g.maxRunning = *sg.MaxRunningRequests
	}
	if g.decodeSpeedup <= 0 {
		g.decodeSpeedup = 1
	}
	if !args.EnableChunkedPrefill {
		// SGLang with chunking disabled prefills a prompt whole; only
		// max_prefill_tokens still limits what joins it in the batch.
		g.chunkSize = math.MaxInt
	}
	// SGLang caps the initial ratio at 1: a conservativeness above 1/0.7
	// reserves every running request's whole clipped output, no more.
	g.initRatio = min(1, sglangInitRatio*sg.ScheduleConservativeness)
	g.minRatio = g.initRatio * sglangMinRatioFactor
	g.ratioDecay = (g.initRatio - g.minRatio) / sglangDecaySteps
	g.ratio = g.initRatio
	// Decode workers never announce their cache; without prefix caching
	// nothing is ever inserted, so there is nothing to announce either.
	g.cache = newRadixCache(g.total, g.caching && !g.decodeWorker)
	g.setup(args, g)
	return g, nil
}

func (g *SGLang) newReq() *sgReq {
	if r := g.spare.Take(); r != nil {
		return r
	}
	return &sgReq{last: noSlot}
}

func (g *SGLang) recycle(r *sgReq) {
	g.byID.Delete(r.id)
	*r = sgReq{reqCore: r.recycled(&g.arenas), pages: r.pages[:0], last: noSlot, state: sgDone}
	g.spare.Put(r)
}

// Submit implements Scheduler. On a prefill worker a Hold request is the
// source of a handoff: destination-first (the default) parks it in the
// bootstrap queue, holding nothing, until DestinationReady; with
// sglang.optimistic_prefill it is queued for prefill at once.
func (g *SGLang) Submit(now float64, req Request, policy CompletionPolicy) error {
	r, err := g.enqueue(now, req, policy)
	if err != nil {
		return err
	}
	if policy == Hold && g.prefillWorker && !g.optimistic {
		r.state = sgBoot
		g.bootSeq++
		r.bootSeq = g.bootSeq
		g.boot = append(g.boot, bootEntry{r: r, seq: r.bootSeq})
		g.bootLive++
		return nil
	}
	g.waiting = append(g.waiting, r)
	return nil
}

// enqueue validates req and builds its request, not yet queued.
func (g *SGLang) enqueue(now float64, req Request, policy CompletionPolicy) (*sgReq, error) {
	if err := checkNew(req, &g.byID, g.hashBlock(), g.cache.ev.withTokens); err != nil {
		return nil, err
	}
	r := g.newReq()
	// Admission refuses a request whose full length overflows the pool
	// (neverFits), so none grows past it plus its last, unfed token; under
	// dynamo_compat none grows past the pool, whose last page it cannot
	// take. A prefill worker generates only the first token, or, under
	// dynamo_compat, MaxTokens as Dynamo's core does.
	r.fill(now, req, policy, g.prefillWorker && !g.compat, g.hashBlock(), g.total*g.page+1, &g.arenas, g.tokSeed, g.cache.ev.withTokens)
	r.state = sgWaiting
	g.byID.Set(r.id, r)
	return r, nil
}

// ReleaseHeld implements Scheduler.
func (g *SGLang) ReleaseHeld(now float64, id uint64, outcome Outcome, events *[]Event) bool {
	if outcome != Transferred && outcome != Aborted {
		return false
	}
	return g.endHold(now, id, outcome, EndReleased, events)
}

// freeHold is the handoffBook hook: the hold on id ended, so its path is
// unlocked (the pages stay cached, evictable) and its private pages freed.
// Waiting destinations are retried by the next pass's admission, where
// SGLang reserves.
func (g *SGLang) freeHold(_ float64, id uint64, _ *[]Event) {
	r, _ := g.byID.Get(id)
	g.cache.unhold(r.last)
	for _, p := range r.pages {
		g.cache.release(p)
	}
	g.heldPrivate -= len(r.pages)
	g.recycle(r)
}

// Cancel implements Scheduler.
func (g *SGLang) Cancel(now float64, id uint64, events *[]Event) bool {
	r, ok := g.byID.Get(id)
	if !ok {
		return false
	}
	switch r.state {
	case sgHeld:
		return g.endHold(now, id, Aborted, EndCancelled, events)
	case sgAwaitKV, sgReserved:
		return g.CancelDestination(now, id, events)
	case sgBoot:
		g.leaveBoot(r)
	case sgWaiting:
		g.waiting = removeReq(g.waiting, r)
	case sgActivated:
		g.activated = removeReq(g.activated, r)
	case sgRunning:
		g.running = removeReq(g.running, r)
	}
	n := r.depth + len(r.pages)
	g.freeKV(r)
	*events = append(*events, Event{Kind: EventCancelled, At: now, RequestID: id, Blocks: n})
	g.recycle(r)
	return true
}

// removeReq deletes r from list, keeping the order of the rest.
func removeReq(list []*sgReq, r *sgReq) []*sgReq {
	if i := slices.Index(list, r); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	return list
}

// HasWork implements Scheduler.
// Requests in the bootstrap queue are not work: they wait for an input.
func (g *SGLang) HasWork() bool {
	return len(g.running) > 0 || len(g.waiting) > 0 || len(g.activated) > 0 || len(g.done) > 0 || len(g.expired) > 0
}

// Metrics implements Scheduler.
func (g *SGLang) Metrics() Metrics {
	c := g.cache
	held := c.heldOnly + g.heldPrivate
	m := Metrics{
		TotalBlocks:        g.total,
		ActiveBlocks:       c.active(),
		InactiveBlocks:     c.evictable,
		FreeBlocks:         len(c.free),
		HeldBlocks:         held,
		RouterActiveBlocks: c.active() - held,
		Running:            len(g.running),
		Waiting:            len(g.waiting) + g.bootLive + len(g.activated),
		Preemptions:        g.retractions,
	}
	g.fillMetrics(&m)
	if g.includeHeld {
		m.RouterActiveBlocks = c.active()
	}
	return m
}

// NewTokenRatio is the fraction of running requests' remaining output that
// admission currently reserves room for. It decays each decode pass from
// 0.7 × schedule_conservativeness to 14% of that, and snaps back on an
// allocation failure or a retraction.
func (g *SGLang) NewTokenRatio() float64 { return g.ratio }

// audit checks the cache's counters against a recount, and the requests'
// page ownership against the cache's.
func (g *SGLang) audit() error {
	if err := g.cache.audit(); err != nil {
		return err
	}
	private, heldPrivate := 0, 0
	for _, r := range g.byID.All() {
		private += len(r.pages)
		if r.state == sgHeld {
			heldPrivate += len(r.pages)
		}
		if want := ceilDiv(r.kvLen, g.page); r.kvLen > 0 && r.depth+len(r.pages) != want && r.depth+len(r.pages) != want+1 {
			return fmt.Errorf("request %d: %d KV tokens on %d path + %d private pages", r.id, r.kvLen, r.depth, len(r.pages))
		}
		if err := g.auditMatch(r); err != nil {
			return err
		}
	}
	switch {
	case len(g.running)+g.slotsReserved() > g.maxRunning:
		return fmt.Errorf("%d running (with slot-holding reservations) exceed the cap %d", len(g.running)+g.slotsReserved(), g.maxRunning)
	case private != g.cache.private:
		return fmt.Errorf("requests own %d private pages, cache counts %d", private, g.cache.private)
	case heldPrivate != g.heldPrivate:
		return fmt.Errorf("held requests own %d private pages, counter %d", heldPrivate, g.heldPrivate)
	}
	return nil
}

// auditMatch checks r's remembered prefix match against a fresh walk: equal
// while the tree is unchanged, a prefix of it while nothing was evicted.
func (g *SGLang) auditMatch(r *sgReq) error {
	if r.matchVer == 0 || r.matchEvicts != g.cache.evictions {
		return nil
	}
	n, last := g.cache.match(r.hashes[:r.matchLimit])
	switch {
	case r.matchVer == g.cache.version && (n != r.matchPages || last != r.matchLast):
		return fmt.Errorf("request %d: remembered match %d pages ending at %d, tree has %d ending at %d", r.id, r.matchPages, r.matchLast, n, last)
	case n < r.matchPages:
		return fmt.Errorf("request %d: remembered match %d pages, but only %d remain with no eviction", r.id, r.matchPages, n)
	}
	return nil
}

// hashBlock is the page size to hash prompts by, 0 when prefix caching is
// off and nothing is ever inserted.
func (g *SGLang) hashBlock() int {
	if g.caching {
		return g.page
	}
	return 0
}

// prefix matches r's pages against the tree. The match stops short of the
// last token, whose logits produce the next one and so must be computed.
func (g *SGLang) prefix(r *sgReq) (pages int, last int32) {
	if !g.caching {
		return 0, noSlot
	}
	c := g.cache
	limit := (r.length - 1) / g.page
	if r.matchVer == c.version && r.matchLimit == limit {
		return r.matchPages, r.matchLast
	}
	r.ensureHashes(limit, g.page, &g.arenas)
	n, last := 0, int32(noSlot)
	if r.matchVer != 0 && r.matchLimit == limit && r.matchEvicts == c.evictions {
		// Nothing left the tree since the last match, so it still holds
		// and only the pages after it need looking up.
		n, last = r.matchPages, r.matchLast
	}
	more, deeper := c.match(r.hashes[n:limit])
	if more > 0 {
		n, last = n+more, deeper
	}
	r.matchPages, r.matchLast, r.matchLimit = n, last, limit
	r.matchVer, r.matchEvicts = c.version, c.evictions
	return n, last
}

// freeKV drops r's KV: its path is unlocked (the pages stay cached and
// become evictable unless another request locks them too) and its private
// pages are freed. It returns the pages that stopped being in use.
func (g *SGLang) freeKV(r *sgReq) int {
	before := g.cache.active()
	g.cache.unlock(r.last)
	for _, p := range r.pages {
		g.cache.release(p)
	}
	r.pages = r.pages[:0]
	r.last, r.depth, r.kvLen = noSlot, 0, 0
	return before - g.cache.active()
}

// insert moves r's page-aligned computed KV into the tree: each full
// private page becomes a node (or, if the tree already has it, is freed in
// favour of the cached copy) and r's lock follows the path down.
func (g *SGLang) insert(r *sgReq) {
	full := r.kvLen / g.page
	if !g.caching || full <= r.depth {
		return
	}
	r.ensureHashes(full, g.page, &g.arenas)
	if g.cache.ev.withTokens {
		g.cache.ev.storing(r.tail, r.tailAt)
	}
	used := 0
	for i := r.depth; i < full; i++ {
		r.last = g.cache.extend(r.last, r.pages[used], r.hashes[i], r.locals[i], i)
		used++
	}
	r.depth = full
	n := copy(r.pages, r.pages[used:])
	r.pages = r.pages[:n]
}

// neverFits explains why r could not complete even alone on an empty pool,
// or returns "". Under dynamo_compat nothing is refused for that (Dynamo
// admits what its budget allows and the request stalls, doc.go), except a
// destination whose prompt alone needs more pages than the pool has, which
// Dynamo refuses when it is reserved.
func (g *SGLang) neverFits(r *sgReq) string {
	if g.compat {
		if pages := ceilDiv(r.prompt, g.page); r.state == sgAwaitKV && pages > g.total {
			return fmt.Sprintf("prompt of %d tokens needs %d pages of %d tokens but num_gpu_blocks is %d",
				r.prompt, pages, g.page, g.total)
		}
		return ""
	}
	need := r.length + r.maxOut - r.out - 1
	if pages := ceilDiv(need, g.page); pages > g.total {
		return fmt.Sprintf("prompt of %d tokens plus %d more output tokens needs %d pages of %d tokens but num_gpu_blocks is %d",
			r.prompt, r.maxOut-r.out, pages, g.page, g.total)
	}
	return ""
}

// sortLPM orders the waiting requests after any mid-prefill one by longest
// cached prefix, keeping arrival order among equals.
func (g *SGLang) sortLPM(from int) {
	q := g.waiting[from:]
	if !g.lpm || !g.caching || len(q) < 2 || len(q) > sglangLPMMaxQueue {
		return
	}
	for _, r := range q {
		g.prefix(r)
	}
	slices.SortStableFunc(q, func(a, b *sgReq) int { return b.matchPages - a.matchPages })
}

// admit builds the pass's extend batch from the waiting queue, as SGLang's
// get_new_batch_prefill does. The remaining total budget is the free and
// evictable room minus the unused tails of the running requests' last pages
// and the running requests' expected growth (their remaining output,
// clipped, times the new-token ratio). Each candidate is charged its
// page-rounded chunk, the cached pages it locks that were evictable, and,
// when the chunk completes its prompt, its own clipped output. The queue
// stops at the first request that does not fit; a request cut into a chunk
// ends the batch and stays first in the queue.
func (g *SGLang) admit(now float64, out *Output) {
	g.batch = g.batch[:0]
	awaiting := g.dests.Len() - g.reservedReqs
	if g.slotReserve {
		awaiting = 0
	}
	if len(g.waiting) == 0 || len(g.running)+g.slotsReserved() >= g.maxRunning && awaiting == 0 {
		// With no running slot free nobody can join (a reservation needs
		// no slot, but none is waiting), so neither ordering the queue nor
		// looking at its head would change anything.
		return
	}
	from := 0
	if g.waiting[0].kvLen > 0 {
		from = 1
	}
	g.sortLPM(from)
	if g.compat {
		// Dynamo main orders the queue by priority, higher first; the
		// stable sort keeps arrival (or lpm) order among equals.
		slices.SortStableFunc(g.waiting[from:], func(a, b *sgReq) int { return b.priority - a.priority })
	}

	remTotal := float64(g.cache.available() * g.page)
	for _, r := range g.running {
		// The page overhead is Dynamo's: the unused tail of each running
		// request's last page.
		remTotal -= float64((r.depth+len(r.pages))*g.page - r.kvLen)
		remTotal -= float64(min(r.maxOut-r.out, g.clip)) * g.ratio
	}
	remTotal -= float64(g.reservedGrowth) * g.ratio
	remInput, remChunk := g.maxPrefill, g.chunkSize
	g.oom = false
	i := 0
	for ; i < len(g.waiting); i++ {
		r := g.waiting[i]
		// A reservation takes pages but no running slot, as in Dynamo.
		if (r.state != sgAwaitKV || g.slotReserve) && len(g.running)+len(g.batch)+g.slotsReserved() >= g.maxRunning {
			break
		}
		idle := len(g.running) == 0 && len(g.batch) == 0 && g.reservedReqs == 0
		if r.state == sgAwaitKV {
			ok, cost := g.reserve(r, now, idle, remTotal, out)
			if !ok {
				break
			}
			remTotal -= float64(cost)
			continue
		}
		continuing := r.kvLen > 0
		hits, last := 0, int32(noSlot)
		if !continuing {
			if why := g.neverFits(r); why != "" {
				out.Rejections = append(out.Rejections, Rejection{RequestID: r.id, At: now, Code: RejectNeverFits, Reason: why})
				r.state = sgDone
				continue
			}
			hits, last = g.prefix(r)
		}
		done := r.kvLen
		if !continuing {
			done = hits * g.page
		}
		extend := r.length - done
		limit := remChunk
		if continuing && !idle {
			limit = min(limit, int(remTotal))
		}
		chunk := extend
		if chunk > limit {
			chunk = limit / g.page * g.page
		}
		// Dynamo charges the prefill and chunk budgets whole pages
		// (dynamo_compat); mocker, as SGLang, the tokens computed.
		charged := chunk
		if g.compat {
			charged = ceilDiv(chunk, g.page) * g.page
		}
		if chunk <= 0 || (len(g.batch) > 0 && charged > remInput) {
			break
		}
		complete := chunk == extend
		cost := ceilDiv(chunk, g.page) * g.page
		if complete {
			cost += min(r.maxOut-r.out, g.clip)
		}
		// Locking the cached prefix takes its unlocked pages out of the
		// evictable room the budget counted, so they are charged too.
		if !continuing {
			cost += g.cache.lockCost(last) * g.page
		}
		// An idle worker admits its head whenever the pages exist: the
		// request can then finish alone (neverFits), so it cannot wait
		// forever on a reservation for output nobody else competes for.
		// Dynamo charges it like any other, idle or not (dynamo_compat).
		if !continuing && (!idle || g.compat) && float64(cost) >= remTotal {
			break
		}
		if !g.materialize(r, hits, last, chunk) {
			g.oom = true
			g.ratio = g.initRatio
			break
		}
		if !r.admitted {
			r.admitted = true
			r.cached = int32(done)
			r.queued = float32(now - r.arrival)
		}
		remTotal -= float64(cost)
		remInput -= charged
		remChunk -= charged
		g.batch = append(g.batch, r)
		g.prefillToks += chunk
		g.sumISL += float64(done + chunk)
		g.sumPrefix += float64(done)
		if !complete {
			g.insert(r)
			i++
			break
		}
		r.state = sgRunning
	}
	// Drop what was admitted whole, reserved or rejected; a chunked
	// request stays first.
	keep := 0
	for _, r := range g.waiting[:i] {
		switch r.state {
		case sgWaiting:
			g.waiting[keep] = r
			keep++
		case sgDone:
			g.recycle(r)
		}
	}
	if keep != i {
		n := copy(g.waiting[keep:], g.waiting[i:])
		clear(g.waiting[keep+n:])
		g.waiting = g.waiting[:keep+n]
	}
}

// materialize gives r the pages for chunk more tokens: a fresh request
// first locks its cached prefix of hits pages ending at last. On failure
// everything taken here is given back.
func (g *SGLang) materialize(r *sgReq, hits int, last int32, chunk int) bool {
	fresh := r.kvLen == 0
	if fresh {
		if last != noSlot {
			g.cache.lock(last)
		}
		r.last, r.depth, r.kvLen = last, hits, hits*g.page
	}
	had := len(r.pages)
	for n := ceilDiv(r.kvLen+chunk, g.page) - r.depth - had; n > 0; n-- {
		s, ok := g.cache.alloc()
		if !ok {
			for _, p := range r.pages[had:] {
				g.cache.release(p)
			}
			r.pages = r.pages[:had]
			if fresh {
				g.cache.unlock(r.last)
				r.last, r.depth, r.kvLen = noSlot, 0, 0
			}
			return false
		}
		r.pages = append(r.pages, s)
	}
	r.kvLen += chunk
	return true
}

// Pass implements Scheduler. A pass is an extend pass when admission took
// anyone (only they advance; a prompt finishing its prefill yields its
// first token), otherwise a decode pass over the running set.
func (g *SGLang) Pass(now float64, out *Output) PassResult {
	g.cache.beginPass()
	res := g.pass(now, out)
	g.cache.vl.end()
	return res
}

func (g *SGLang) pass(now float64, out *Output) PassResult {
	g.cache.ev.reset()
	g.sumISL, g.sumPrefix, g.prefillToks = 0, 0, 0
	out.Completions = append(out.Completions, g.done...)
	out.Rejections = append(out.Rejections, g.expired...)
	g.done, g.expired = g.done[:0], g.expired[:0]
	// Activated destinations take the free running slots first: their KV
	// is in place and each only needs its next token.
	n := 0
	for n < len(g.activated) && (g.slotReserve || len(g.running) < g.maxRunning) {
		r := g.activated[n]
		r.state = sgRunning
		g.running = append(g.running, r)
		n++
	}
	if n > 0 {
		k := copy(g.activated, g.activated[n:])
		clear(g.activated[k:])
		g.activated = g.activated[:k]
	}
	reserved := g.reservedReqs
	g.admit(now, out)
	var res PassResult
	switch {
	case len(g.batch) > 0:
		res = g.extendPass(now, out)
	case len(g.running) > 0:
		res = g.decodePass(now, out)
	case g.reservedReqs != reserved:
		res = PassChanged
	default:
		res = PassIdle
	}
	g.cache.ev.flushTo(out)
	return res
}

func (g *SGLang) extendPass(now float64, out *Output) PassResult {
	var prefillMs, decodeMs float64
	if g.decodeWorker {
		// A decode worker's prompt KV comes from elsewhere; its extend pass
		// costs a decode step.
		decodeMs = g.decodeMs(len(g.batch), g.sumISL)
	} else {
		prefillMs = g.model.PrefillMs(len(g.batch), meanLen(g.sumISL, len(g.batch), g.compat), meanLen(g.sumPrefix, len(g.batch), g.compat))
		if !g.prefillWorker {
			// Sampling the first tokens of the prompts this pass completes
			// costs a decode step over them, as in Dynamo, so the time to
			// first token is prefill plus one step (a prefill worker, as for
			// vLLM, is charged the prefill alone).
			n, ctx := 0, 0
			for _, r := range g.batch {
				if r.kvLen == r.length {
					n++
					ctx += r.length
				}
			}
			if n > 0 {
				decodeMs = g.decodeMs(n, float64(ctx))
			}
		}
	}
	end := now + prefillMs + decodeMs
	out.Ran = true
	out.End = end
	out.PrefillMs, out.DecodeMs = prefillMs, decodeMs
	out.PrefillTokens = g.prefillToks
	for _, r := range g.batch {
		if r.kvLen < r.length {
			continue // a chunk: no token yet
		}
		if g.compat {
			g.running = append(g.running, r)
			g.sampleCompat(r, end, out)
			continue
		}
		// The prompt's full pages are cached as soon as they are computed
		// (SGLang's cache_unfinished_req), so the router and the next
		// admission see them while the request runs.
		g.insert(r)
		g.running = append(g.running, r)
		g.emit(r, end, out)
	}
	g.compactRunning()
	if g.compat {
		// Dynamo decays the ratio on every pass, extend passes too.
		g.ratio = max(g.minRatio, g.ratio-g.ratioDecay)
	}
	return PassRan
}

// decodeMs is the decode step time for batch sequences totalling ctx
// context tokens; the active KV is the logical context, capped at the pool.
func (g *SGLang) decodeMs(batch int, ctx float64) float64 {
	pool := float64(g.total * g.page)
	active := min(ctx, pool)
	if g.compat {
		// Dynamo passes the logical KV, however far past the pool.
		active = ctx
	}
	d := g.model.DecodeMs(batch, active, pool, meanLen(ctx, batch, g.compat))
	return max(perf.MinDecodeMs, d) / g.decodeSpeedup
}

// needsPage reports whether r's next decode step opens a new page.
func (g *SGLang) needsPage(r *sgReq) bool {
	return r.kvLen+1 > (r.depth+len(r.pages))*g.page
}

func (g *SGLang) decodePass(now float64, out *Output) PassResult {
	retracted := false
	// Each running request opens at most one page a step, so the room is
	// only counted, and a victim sought, when it might fall short.
	for g.cache.available() < len(g.running) {
		need := 0
		for _, r := range g.running {
			if g.needsPage(r) {
				need++
			}
		}
		if need <= g.cache.available() {
			break
		}
		v := g.victim()
		if v == nil {
			break
		}
		g.retract(v, now, out)
		retracted = true
	}
	if retracted && g.compat {
		g.ratio = g.reestimateRatio()
	}
	g.batch = g.batch[:0]
	ctx := 0
	for _, r := range g.running {
		if g.needsPage(r) {
			s, ok := g.cache.alloc()
			if !ok {
				continue // stalls until memory comes back
			}
			r.pages = append(r.pages, s)
		}
		g.batch = append(g.batch, r)
		ctx += r.length
	}
	if len(g.batch) == 0 {
		if retracted {
			return PassChanged
		}
		return PassIdle
	}
	if !retracted {
		g.ratio = max(g.minRatio, g.ratio-g.ratioDecay)
	}
	var decodeMs float64
	if !g.prefillWorker {
		decodeMs = g.decodeMs(len(g.batch), float64(ctx))
	}
	end := now + decodeMs
	out.Ran = true
	out.End = end
	out.DecodeMs = decodeMs
	out.DecodeTokens = len(g.batch)
	for _, r := range g.batch {
		r.kvLen++
		if g.compat {
			// The slot just taken is the new token's (sampleCompat).
			g.emit(r, end, out)
			if r.state == sgRunning && r.kvLen >= (r.depth+1)*g.page {
				g.insert(r)
			}
			continue
		}
		if r.kvLen >= (r.depth+1)*g.page {
			g.insert(r) // a page the step filled is cached at once
		}
		g.emit(r, end, out)
	}
	g.compactRunning()
	return PassRan
}

// sampleCompat samples the first token of r, whose prompt the extend pass
// just computed, as Dynamo's mocker does (dynamo_compat): the token takes
// its KV slot at once, a new page when it crosses a page boundary, and
// every full page of the sequence, that token's included, is cached after
// it. The default model takes that slot in the next step, which computes
// the token's KV (doc.go). When no page is left the request waits for its
// token until a decode pass finds one, as Dynamo's does.
func (g *SGLang) sampleCompat(r *sgReq, end float64, out *Output) {
	if g.needsPage(r) {
		s, ok := g.cache.alloc()
		if !ok {
			g.insert(r)
			return
		}
		r.pages = append(r.pages, s)
	}
	r.kvLen++
	g.emit(r, end, out)
	if r.state == sgRunning {
		g.insert(r)
	}
}

// emit gives running request r its next token at end, finishing it when
// it reaches its output cap.
func (g *SGLang) emit(r *sgReq, end float64, out *Output) {
	r.generate(end, out)
	if r.out >= r.maxOut {
		g.finish(r, end, out)
	}
}

// slotsReserved is how many running slots destinations take before they
// run: none, unless reserve_takes_slot gives each reservation one.
func (g *SGLang) slotsReserved() int {
	if !g.slotReserve {
		return 0
	}
	return g.reservedReqs + len(g.activated)
}

// reestimateRatio is the new-token ratio Dynamo main sets after a
// retraction, from the requests still running:
// min(1, (decoded + sglangRetractDecodeSteps·n) / (max_new + 1)), with
// decoded their output tokens so far, n their number and max_new their
// output caps. mocker resets the ratio to its initial value instead (as
// SGLang did before estimating); dynamo_compat selects this one.
func (g *SGLang) reestimateRatio() float64 {
	decoded, maxNew := 0, 0
	for _, r := range g.running {
		decoded += r.out
		maxNew += r.maxOut
	}
	return min(1, float64(decoded+sglangRetractDecodeSteps*len(g.running))/float64(maxNew+1))
}

// victim picks the request to retract: the one with the fewest output
// tokens (the least work lost), the longer prompt among equals, as SGLang
// does. The last running request is retracted only while an activated
// destination waits for its slot (that one's KV is in place, so it can run
// in the room the retraction frees); a request mid chunked prefill is
// always a candidate.
func (g *SGLang) victim() *sgReq {
	var v *sgReq
	better := func(r *sgReq) bool {
		return v == nil || r.out < v.out || (r.out == v.out && r.length >= v.length)
	}
	if len(g.running) > 1 || len(g.activated) > 0 {
		for _, r := range g.running {
			if better(r) {
				v = r
			}
		}
	}
	if len(g.waiting) > 0 {
		if r := g.waiting[0]; r.kvLen > 0 && better(r) {
			v = r
		}
	}
	return v
}

// retract frees r's KV (its cached prefix stays in the tree, unlocked) and
// sends it to the front of the waiting queue, behind a request mid chunked
// prefill. It keeps its output tokens and recomputes what is no longer
// cached on readmission. The event counts the pages it stopped using,
// leaving out prefix pages other requests still lock.
func (g *SGLang) retract(r *sgReq, now float64, out *Output) {
	n := g.freeKV(r)
	r.retracts++
	g.retractions++
	g.ratio = g.initRatio
	out.Events = append(out.Events, Event{Kind: EventPreempted, At: now, RequestID: r.id, Blocks: n})
	if r.state != sgRunning {
		return // the chunked request: already first in the queue
	}
	g.running = removeReq(g.running, r)
	r.state = sgWaiting
	at := 0
	if len(g.waiting) > 0 && g.waiting[0].kvLen > 0 {
		at = 1
	}
	g.waiting = slices.Insert(g.waiting, at, r)
}

// finish ends r after its last token: its page-aligned KV is inserted into
// the radix tree, then unlocked (Release) or kept locked as a hold.
func (g *SGLang) finish(r *sgReq, end float64, out *Output) {
	c := r.completion(end)
	c.Preemptions, c.Held = r.retracts, r.policy == Hold
	out.Completions = append(out.Completions, c)
	g.insert(r)
	r.state = sgDone
	if r.policy == Hold {
		if r.last != noSlot {
			g.cache.hold(r.last)
		}
		g.heldPrivate += len(r.pages)
		r.state = sgHeld
		g.startHold(end, r.id, r.depth+len(r.pages), &out.Events)
		if r.destReady {
			// The decode side reserved before this prefill ran, so the
			// transfer starts the moment the KV exists.
			g.StartTransfer(end, r.id, r.transferTokens, &out.Events)
		}
		return
	}
	g.freeKV(r)
}

// compactRunning drops finished requests from the running set, keeping
// order, and recycles those that hold nothing.
func (g *SGLang) compactRunning() {
	j := 0
	for _, r := range g.running {
		switch r.state {
		case sgRunning:
			g.running[j] = r
			j++
		case sgDone:
			g.recycle(r)
		}
	}
	clear(g.running[j:])
	g.running = g.running[:j]
}
