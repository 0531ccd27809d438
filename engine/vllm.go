package engine

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/kvstrand/mocker/internal/idtab"
	"github.com/kvstrand/mocker/internal/spare"
	"github.com/kvstrand/mocker/perf"
)

type seqState uint8

const (
	stWaiting   seqState = iota
	stAwaitKV            // a destination waiting for its reservation
	stReserved           // a destination holding blocks, awaiting Activate
	stActivated          // an activated destination waiting for a running slot
	stRunning
	stHeld
	stDone
)

// placeholderToken stands for the first output token of an activated
// destination: the prefill side produced it, so its id is not known here,
// but its KV must still be computed by the first decode pass.
const placeholderToken = 0

// seq is a request inside the vLLM model. Seqs are recycled, slices and all,
// so a steady stream of requests does not allocate.
type seq struct {
	// The fields a pass touches for every running request lead, the
	// reqCore's own hot fields right after them: a seq is 256 bytes, a
	// size class whose objects start on a cache line, so a decode pass
	// reads the first two lines of it.
	state       seqState
	passPrefill bool
	passBatch   bool // counted in the prefill batch (prompt tokens scheduled)
	// admitted is set once the request first got KV; cached is fixed then.
	admitted bool
	// coasting: the request's length and output count stand as of pass
	// from; see coast.
	coasting bool
	// clamped: guaranteed_no_evict cut max_tokens to the room the pool
	// has after the prompt, so the completion is Truncated.
	clamped  bool
	computed int // tokens whose KV is computed (num_computed_tokens)
	stored   int // leading blocks that carry their sequence hash
	// Contributions to the current pass, refunded if the seq is preempted
	// later in the same pass (passISL and passPrefix too). Token counts
	// fit in 32 bits: a sequence is no longer than the pool holds.
	passID     uint64
	passTokens int32
	preempts   int32
	blocks     []int32
	reqCore
	passISL, passPrefix int32
	from                uint64
	rank                uint64 // orders the running set (VLLM.run)
}

// VLLM is the vLLM scheduler model: a two-phase pass (running requests, then
// waiting ones) under a token budget and a sequence cap, chunked prefill,
// prefix-hit admission credited only for active blocks, and recompute
// preemption. See engine/doc.go, "Two scheduler models", and docs/fidelity.md.
type VLLM struct {
	bs, total int
	// bsShift is log2(bs) when bs is a power of two, else -1: the block
	// counts every pass takes of every running request then need no
	// division.
	bsShift       int
	maxSeqs       int
	maxBatched    int
	maxModelLen   int
	chunked       bool
	caching       bool
	prefillWorker bool
	decodeWorker  bool
	fifo          bool
	includeHeld   bool
	slotReserve   bool // a reservation takes a running slot (reserve_takes_slot)
	compat        bool // dynamo_compat
	// noEvict is TensorRT-LLM's guaranteed_no_evict policy (trtllm.go):
	// admission sets aside every admitted request's blocks to its last
	// token, and nothing is preempted.
	noEvict       bool
	admitting     bool // in a pass's admission phase
	decodeSpeedup float64
	model         perf.Model

	handoffBook

	pool *blockPool
	// tokSeed seeds the requests' generated tokens (reqCore.token).
	tokSeed uint64
	// hitSlots are the slots of the prefix hits prefixHits last found;
	// hitsOf is the waiting request admission found them for, as it hands
	// the request to schedule, which clears it.
	hitSlots []int32
	hitsOf   *seq
	waiting  seqDeque
	// pending are destinations waiting for their reservation, in arrival
	// order; activated are destinations whose KV arrived, waiting for a
	// running slot. Neither keeps a slot before it runs (unless
	// reserve_takes_slot).
	pending   seqDeque
	activated seqDeque
	// running is the running set, in order; active is its requests that
	// do not coast, in the same order, which the passes go through.
	running []*seq
	active  []*seq
	ranks   uint64
	byID    idtab.Table[*seq]
	spare   spare.List[seq]
	arenas  hashArenas // the hash storage of recycled requests
	// blockLists are spare block lists (see blockRoom).
	blockLists [][]int32
	ready      []*seq
	// done holds completions decided outside a pass (an activated
	// destination with nothing left to decode); the next pass reports them.
	done []Completion
	// truncated are requests the waiting phase found too long for the pool
	// after they streamed tokens; the pass finishes them at its end.
	truncated []*seq
	// rejected are destinations refused at Reserve; the next pass reports
	// them.
	rejected []Rejection
	// passEnd is the End of the latest pass: a reservation attempted
	// while that pass is in flight is stamped there, since the pass has
	// already taken and freed blocks as of its End.
	passEnd float64

	preemptions uint64
	// destTail sums, under noEvict, the blocks reserved and activated
	// destinations may still take before they finish, and runTail those
	// the running set may (see noEvictRoom); noEvictShort counts running
	// requests that found the pool short all the same (never, while the
	// policy's reservations hold: audit reports it).
	destTail     int
	runTail      int
	noEvictShort uint64

	// Pass accumulators.
	passID    uint64
	budget    int
	preempted bool
	// waited says a running request waited for blocks in the pass
	// rather than preempt (they were lent to copies to the host tier).
	waited      bool
	batch       int
	sumISL      float64
	sumPrefix   float64
	prefillToks int
	decodeToks  int
	// onboardMs is the pass's time copying blocks back from the tiers
	// below the GPU pool; onboardPerBlock is one block's copy from the
	// host tier (pool.g2), stageG3PerBlock and stageG4PerBlock the time
	// to stage one block from disk (pool.g3) or object storage (pool.g4)
	// into the host tier first.
	onboardMs       float64
	onboardPerBlock float64
	stageG3PerBlock float64
	stageG4PerBlock float64

	// The destination and the waiting request that last lacked blocks
	// (see lackWatch).
	reserveLack, admitLack lackWatch
	walkAlways             bool   // tests: no lackWatch shortcut
	sparedWalks            uint64 // prefix walks the lackWatch spared (tests read it)

	// Coasting (see coast): canCoast says this worker's requests may;
	// cpass counts the passes that ran; coastN requests coast, and
	// coastLen sums their length - from; coastQ orders them by the pass
	// they are due in.
	canCoast bool
	cpass    uint64
	coastN   int
	coastLen int
	coastQ   coastQueue
}

// NewVLLM builds the vLLM model for args, which must pass Args.Validate (an
// unset engine_type counts as vllm). model nil means perf.Polynomial; seed
// drives the generated token ids.
func NewVLLM(args Args, model perf.Model, seed uint64) (*VLLM, error) {
	if args.EngineType == "" {
		args.EngineType = EngineVLLM
	}
	if err := args.Validate(); err != nil {
		return nil, err
	}
	if args.EngineType != EngineVLLM && args.EngineType != EngineTRTLLM {
		return nil, &ArgError{Field: "engine_type", Message: fmt.Sprintf("%q given to the vLLM core; set it to %q or %q, or build with New", args.EngineType, EngineVLLM, EngineTRTLLM)}
	}
	if args.BlockSize <= 0 {
		return nil, fmt.Errorf("block_size %d: must be positive", args.BlockSize)
	}
	if args.NumGPUBlocks <= 0 || args.NumGPUBlocks > math.MaxInt32 {
		return nil, fmt.Errorf("num_gpu_blocks %d: must be between 1 and %d", args.NumGPUBlocks, math.MaxInt32)
	}
	model = timingModel(args, model)
	v := &VLLM{
		bs:            args.BlockSize,
		bsShift:       -1,
		total:         args.NumGPUBlocks,
		maxSeqs:       math.MaxInt,
		maxBatched:    math.MaxInt,
		maxModelLen:   math.MaxInt,
		chunked:       args.EnableChunkedPrefill,
		caching:       args.EnablePrefixCaching,
		prefillWorker: args.WorkerType == WorkerPrefill,
		decodeWorker:  args.WorkerType == WorkerDecode,
		fifo:          args.PreemptionMode == PreemptFIFO,
		includeHeld:   args.RouterLoadIncludesHeld,
		slotReserve:   args.ReserveTakesSlot,
		compat:        args.DynamoCompat,
		noEvict:       args.EngineType == EngineTRTLLM && (args.TRTLLM == nil || args.TRTLLM.CapacitySchedulerPolicy == TRTLLMGuaranteedNoEvict),
		decodeSpeedup: args.DecodeSpeedupRatio,
		model:         model,
		tokSeed:       seed ^ 0x6d6f636b6572,
	}
	if v.decodeSpeedup <= 0 {
		v.decodeSpeedup = 1
	}
	if bs := args.BlockSize; bs&(bs-1) == 0 {
		v.bsShift = bits.TrailingZeros(uint(bs))
	}
	v.canCoast = !v.prefillWorker && v.chunked && v.bsShift >= 0
	if args.MaxNumSeqs != nil {
		if *args.MaxNumSeqs <= 0 {
			return nil, fmt.Errorf("max_num_seqs %d: must be positive (null for unbounded)", *args.MaxNumSeqs)
		}
		v.maxSeqs = *args.MaxNumSeqs
	}
	if args.MaxNumBatchedTokens != nil {
		if *args.MaxNumBatchedTokens <= 0 {
			return nil, fmt.Errorf("max_num_batched_tokens %d: must be positive (null for unbounded)", *args.MaxNumBatchedTokens)
		}
		v.maxBatched = *args.MaxNumBatchedTokens
	}
	if args.MaxModelLen != nil {
		if *args.MaxModelLen <= 0 {
			return nil, fmt.Errorf("max_model_len %d: must be positive", *args.MaxModelLen)
		}
		v.maxModelLen = *args.MaxModelLen
	}
	// Prefix caching off: blocks are never indexed, so nothing is shared and
	// nothing is announced. Decode workers never announce either.
	v.pool = newBlockPool(v.total, v.caching && !v.decodeWorker)
	if args.NumG2Blocks > 0 && v.caching {
		v.pool.g2 = newHostTier(args.NumG2Blocks)
		v.onboardPerBlock = args.OnboardMsPerBlock()
		batch := args.offloadBatch()
		if ms := args.OffloadMsPerBlock(); ms > 0 {
			v.pool.timeOffload(ms, batch)
		}
		if args.NumG3Blocks > 0 {
			v.pool.g3 = newHostTier(args.NumG3Blocks)
			v.stageG3PerBlock = args.StageG3MsPerBlock()
			// KVBM's G2 to G3 pipeline runs one batch at a time.
			if ms := args.blockCopyMs(args.BandwidthG2ToG3, DefaultBandwidthG2ToG3); ms > 0 {
				v.pool.link3 = newOffloadLink(ms, batch, 1)
			}
		}
		if args.EnableG4Storage {
			v.pool.g4 = newObjectTier()
			v.stageG4PerBlock = args.StageG4MsPerBlock()
			if ms := args.blockCopyMs(args.BandwidthG2ToG4, DefaultBandwidthG2ToG4); ms > 0 {
				v.pool.link4 = newOffloadLink(ms, batch, batch)
			}
		}
		v.pool.timed = v.pool.link != nil || v.pool.link3 != nil || v.pool.link4 != nil
	}
	v.setup(args, v)
	return v, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// fullBlocks is how many whole blocks n >= 0 tokens fill.
func (v *VLLM) fullBlocks(n int) int {
	if v.bsShift >= 0 {
		return n >> (uint(v.bsShift) & 63)
	}
	return n / v.bs
}

// blocksFor is how many blocks n >= 0 tokens take.
func (v *VLLM) blocksFor(n int) int { return v.fullBlocks(n + v.bs - 1) }

// hashBlock is the block size to hash prompts by, 0 when prefix caching is
// off and nothing is ever looked up.
func (v *VLLM) hashBlock() int {
	if v.caching {
		return v.bs
	}
	return 0
}

func (v *VLLM) newSeq() *seq {
	if s := v.spare.Take(); s != nil {
		return s
	}
	return &seq{}
}

func (v *VLLM) recycle(s *seq) {
	if v.reserveLack.s == s {
		v.unlack(&v.reserveLack)
	}
	if v.admitLack.s == s {
		v.unlack(&v.admitLack)
	}
	v.byID.Delete(s.id)
	v.giveBlockList(s)
	*s = seq{reqCore: s.recycled(&v.arenas), state: stDone}
	v.spare.Put(s)
}

// Submit implements Scheduler.
func (v *VLLM) Submit(now float64, req Request, policy CompletionPolicy) error {
	_, err := v.enqueue(now, req, policy, stWaiting)
	return err
}

// enqueue validates req and appends it to the waiting queue in state st.
func (v *VLLM) enqueue(now float64, req Request, policy CompletionPolicy, st seqState) (*seq, error) {
	if err := checkNew(req, &v.byID, v.hashBlock(), v.pool.ev.withTokens); err != nil {
		return nil, err
	}
	s := v.newSeq()
	maxLen := v.maxLen()
	// A prefill worker stops each request at its first token; Dynamo's
	// core generates the MaxTokens it is given there too (its frontend
	// asks a prefill worker for one), as dynamo_compat does.
	s.fill(now, req, policy, v.prefillWorker && !v.compat, v.hashBlock(), maxLen, &v.arenas, v.tokSeed, v.pool.ev.withTokens)
	if v.noEvict {
		v.clampOutput(s)
	}
	s.state = st
	v.byID.Set(s.id, s)
	if st == stAwaitKV {
		v.pending.pushBack(s)
	} else {
		v.waiting.pushBack(s)
	}
	return s, nil
}

// ReleaseHeld implements Scheduler.
func (v *VLLM) ReleaseHeld(now float64, id uint64, outcome Outcome, events *[]Event) bool {
	if outcome != Transferred && outcome != Aborted {
		return false
	}
	return v.endHold(now, id, outcome, EndReleased, events)
}

// freeHold is the handoffBook hook: the hold on id ended at now, so its
// blocks go back to the pool (tail first), the request is forgotten, and
// the destinations waiting for blocks try again.
func (v *VLLM) freeHold(now float64, id uint64, events *[]Event) {
	s, _ := v.byID.Get(id)
	v.pool.releaseHoldAll(s.blocks)
	v.recycle(s)
	v.reservePending(now, events)
}

// Reserve implements Handoffs: req becomes a destination waiting for
// blocks for its whole prompt (with prefix reuse). As in Dynamo and vLLM it
// keeps KV only, no running slot (it is admitted only while a slot is free,
// as any request is, but does not hold it), and is tried at once and again
// on every change that frees blocks or slots (a hold released, a
// cancellation, a pass's end), not only in passes; while any destination
// waits, fresh requests are not admitted. It never times out here; the
// source's deadlines are authoritative and end it through
// CancelDestination.
func (v *VLLM) Reserve(now float64, req Request, events *[]Event) error {
	if v.prefillWorker {
		return errPrefillDestination(req.ID)
	}
	s, err := v.enqueue(now, req, Release, stAwaitKV)
	if err != nil {
		return err
	}
	v.waitStart(now, req.ID, events)
	at := max(now, v.passEnd)
	if why := v.destNeverFits(s); why.reason != "" {
		v.pending.remove(s)
		v.endDest(at, s.id, EventDestinationCancelled, events)
		v.rejected = append(v.rejected, Rejection{RequestID: s.id, At: at, Code: why.code, Reason: why.reason})
		v.recycle(s)
		return nil
	}
	v.reservePending(now, events)
	return nil
}

// neverFit says why a destination can never be reserved.
type neverFit struct {
	code   RejectCode
	reason string
}

// destNeverFits reports why destination s can never be reserved here, the
// zero value when it can.
func (v *VLLM) destNeverFits(s *seq) neverFit {
	if s.prompt >= v.maxModelLen {
		return neverFit{RejectTooLong, fmt.Sprintf("prompt of %d tokens reaches max_model_len %d", s.prompt, v.maxModelLen)}
	}
	if v.noEvict && s.prompt >= v.total*v.bs {
		return v.noRoomToDecode(s)
	}
	if blocks := ceilDiv(s.length, v.bs); blocks > v.total {
		return neverFit{RejectNeverFits, fmt.Sprintf("sequence of %d tokens needs %d blocks of %d but num_gpu_blocks is %d",
			s.length, blocks, v.bs, v.total)}
	}
	return neverFit{}
}

// reservePending reserves blocks for the waiting destinations, in arrival
// order, until one does not fit. It runs whenever blocks or running slots
// may have been freed. The reservations are stamped at now, or at the End of the pass
// in flight if later: that pass's allocations and releases are already in
// the pool.
//
// Under reserve_takes_slot (mocker's former rule) reservations are made
// only by a pass's admission, after the waiting queue, as they were then.
func (v *VLLM) reservePending(now float64, events *[]Event) bool {
	if v.slotReserve && !v.admitting {
		return false
	}
	at := max(now, v.passEnd)
	if v.pool.timed {
		v.pool.clock = at
	}
	any := false
	for v.pending.len() > 0 {
		if !v.reserve(v.pending.front(), at, events) {
			break
		}
		any = true
	}
	return any
}

// Activate implements Handoffs.
func (v *VLLM) Activate(now float64, id uint64, events *[]Event) bool {
	s, ok := v.byID.Get(id)
	if !ok || s.state != stReserved {
		return false
	}
	v.endDest(now, id, EventDestinationActivated, events)
	s.out = 1 // produced by the prefill side
	s.firstAt = now
	s.admitted = true
	s.computed = s.prompt
	// The placeholder for the prefill's token makes the sequence prompt+1
	// long, so the length limit applies as it would have to an aggregated
	// request right after its first token.
	if v.noEvict {
		v.destTail -= v.tailOf(s)
	}
	if s.out >= s.maxOut || s.prompt+1 >= v.maxModelLen {
		// Nothing left to decode: the request is complete on arrival.
		c := s.completion(now)
		c.Truncated = s.out < s.maxOut || s.clamped
		v.done = append(v.done, c)
		v.freeBlocks(s)
		v.recycle(s)
		v.reservePending(now, events)
		return true
	}
	// The first token's KV is computed by the pass that runs it, which
	// then emits token 1; blocks are indexed there too, so KV events stay
	// in passes. Until a running slot is free it waits, holding its KV.
	s.push(placeholderToken)
	s.state = stActivated
	v.activated.pushBack(s)
	if v.noEvict {
		v.destTail += v.tailOf(s)
	}
	return true
}

// CancelDestination implements Handoffs.
func (v *VLLM) CancelDestination(now float64, id uint64, events *[]Event) bool {
	s, ok := v.byID.Get(id)
	if !ok {
		return false
	}
	switch s.state {
	case stAwaitKV:
		v.pending.remove(s)
	case stReserved:
		if v.noEvict {
			v.destTail -= v.tailOf(s)
		}
		v.freeBlocks(s)
	default:
		return false
	}
	v.endDest(now, id, EventDestinationCancelled, events)
	v.recycle(s)
	v.reservePending(now, events)
	return true
}

// Cancel implements Scheduler.
func (v *VLLM) Cancel(now float64, id uint64, events *[]Event) bool {
	s, ok := v.byID.Get(id)
	if !ok {
		return false
	}
	switch s.state {
	case stHeld:
		return v.endHold(now, id, Aborted, EndCancelled, events)
	case stAwaitKV, stReserved:
		return v.CancelDestination(now, id, events)
	case stWaiting:
		v.waiting.remove(s)
	case stActivated:
		v.activated.remove(s)
		if v.noEvict {
			v.destTail -= v.tailOf(s)
		}
	case stRunning:
		if v.noEvict {
			v.runTail -= v.tailOf(s)
		}
		if s.coasting {
			v.uncoast(s)
		} else {
			i := slices.Index(v.active, s)
			v.active = slices.Delete(v.active, i, i+1)
		}
		i := slices.Index(v.running, s)
		v.running = slices.Delete(v.running, i, i+1)
	}
	n := len(s.blocks)
	v.freeBlocks(s)
	*events = append(*events, Event{Kind: EventCancelled, At: now, RequestID: id, Blocks: n})
	v.recycle(s)
	// Blocks or a running slot may have been freed.
	v.reservePending(now, events)
	return true
}

// HasWork implements Scheduler. Destinations waiting for their reservation
// are not work: they are retried when blocks or slots are freed, never by
// polling (except under reserve_takes_slot, where passes reserve), unless
// GPU slots are lent to copies to the host tier: then the pass that takes
// a copy in frees its slots, and retries them.
func (v *VLLM) HasWork() bool {
	return len(v.running) > 0 || v.waiting.len() > 0 || v.activated.len() > 0 || len(v.done) > 0 || len(v.rejected) > 0 ||
		v.pending.len() > 0 && (v.slotReserve || len(v.pool.lent) > 0)
}

// nextLanding implements slotWaiter: while requests wait or run, the
// landing of the next copy to the host tier that holds GPU slots, which
// a request short of blocks may be waiting for.
func (v *VLLM) nextLanding() (float64, bool) {
	if !v.HasWork() {
		return 0, false
	}
	return v.pool.nextLanding()
}

// lendsSlots implements slotWaiter: the pool lends slots when the copy to
// the host tier is timed.
func (v *VLLM) lendsSlots() bool { return v.pool.lent != nil }

// landingDue implements slotWaiter.
func (v *VLLM) landingDue(now float64) bool { return v.pool.landingDue(now) }

// Metrics implements Scheduler.
func (v *VLLM) Metrics() Metrics {
	p := v.pool
	m := Metrics{
		TotalBlocks:        v.total,
		ActiveBlocks:       p.active,
		InactiveBlocks:     p.inactive,
		FreeBlocks:         len(p.free),
		HeldBlocks:         p.heldOnly,
		RouterActiveBlocks: p.active - p.heldOnly,
		Running:            len(v.running),
		Waiting:            v.waiting.len() + v.pending.len() + v.activated.len(),
		Preemptions:        v.preemptions,
	}
	if t := p.g2; t != nil {
		m.G2Blocks, m.G2Capacity = t.len(), t.capacity()
		m.G2Offloaded, m.G2Onboarded = t.offloaded, t.onboarded
	}
	if t := p.g3; t != nil {
		m.G3Blocks, m.G3Capacity = t.len(), t.capacity()
		m.G3Offloaded, m.G3Onboarded = t.offloaded, t.onboarded
	}
	if t := p.g4; t != nil {
		m.G4Blocks, m.G4Onboarded = len(t.held), t.onboarded
	}
	v.fillMetrics(&m)
	if v.includeHeld {
		m.RouterActiveBlocks = p.active
	}
	return m
}

// audit checks the pool's counters against a recount, and the slot rule:
// the running set never exceeds max_num_seqs (with the reservations, under
// reserve_takes_slot), and the running set and the destination queues
// hold only their states.
func (v *VLLM) audit() error {
	if err := v.pool.audit(); err != nil {
		return err
	}
	if n := len(v.running) + v.slotsReserved(); n > v.maxSeqs {
		return fmt.Errorf("%d running (with slot-holding reservations) exceed max_num_seqs %d", n, v.maxSeqs)
	}
	coasting, coastLen := 0, 0
	for _, s := range v.running {
		if s.state != stRunning {
			return fmt.Errorf("request %d in the running set in state %d", s.id, s.state)
		}
		if s.coasting {
			coasting++
			coastLen += s.length - int(s.from)
		}
	}
	j := 0
	for _, s := range v.running {
		if !s.coasting {
			if j == len(v.active) || v.active[j] != s {
				return fmt.Errorf("the requests that do not coast are not the active list")
			}
			j++
		}
	}
	if j != len(v.active) {
		return fmt.Errorf("%d active requests, %d running that do not coast", len(v.active), j)
	}
	if v.noEvict {
		if err := v.auditNoEvict(); err != nil {
			return err
		}
	}
	if coasting != v.coastN || coastLen != v.coastLen {
		return fmt.Errorf("coasting: %d requests of length sum %d; counted %d and %d", coasting, coastLen, v.coastN, v.coastLen)
	}
	for i := range v.pending.len() {
		if s := v.pending.at(i); s.state != stAwaitKV {
			return fmt.Errorf("request %d pending for a reservation in state %d", s.id, s.state)
		}
	}
	for i := range v.activated.len() {
		if s := v.activated.at(i); s.state != stActivated {
			return fmt.Errorf("request %d waiting for a slot after activation in state %d", s.id, s.state)
		}
	}
	return nil
}

// freeBlocks drops s's KV. Blocks are released tail first, as vLLM does, so
// the LRU evicts a sequence's tail before the prefix others may share.
func (v *VLLM) freeBlocks(s *seq) {
	v.pool.releaseAll(s.blocks)
	v.giveBlockList(s)
	s.stored = 0
	s.computed = 0
}

// maxLen is the longest a sequence can grow here: it ends at
// max_model_len, and one outgrowing the pool after a preemption is
// truncated, so it never exceeds the pool plus the token it last generated.
func (v *VLLM) maxLen() int { return min(v.maxModelLen, v.total*v.bs+1) }

// blockRoom gives s's block list room for every block s can fill, as fill
// does for its tokens, so that the list never regrows. Block lists pass
// from request to request through the worker (blockLists): a request
// takes one when it takes blocks and gives it back when it frees them, so
// a request waiting in a long queue holds none.
func (v *VLLM) blockRoom(s *seq) {
	want := ceilDiv(s.longest(v.maxLen()), v.bs)
	if cap(s.blocks) >= want {
		return
	}
	if n := len(v.blockLists) - 1; n >= 0 {
		l := v.blockLists[n]
		v.blockLists[n] = nil
		v.blockLists = v.blockLists[:n]
		if cap(l) >= want {
			s.blocks = l
			return
		}
	}
	s.blocks = make([]int32, 0, want)
}

// giveBlockList takes s's block list, emptied, for a later request.
func (v *VLLM) giveBlockList(s *seq) {
	if cap(s.blocks) > 0 {
		v.blockLists = append(v.blockLists, s.blocks[:0])
	}
	s.blocks = nil
}

// prefixHits walks s's block hashes from the start until the first miss.
// The hit is capped so the last prompt token is always recomputed (its
// logits produce the next token). active counts hits on referenced blocks,
// the only ones admission credits. The hit blocks' slots are left in
// v.hitSlots, for the caller that goes on to take them.
func (v *VLLM) prefixHits(s *seq) (hits, active int) {
	v.hitSlots = v.hitSlots[:0]
	if !v.caching {
		return 0, 0
	}
	limit := (s.length - 1) / v.bs
	s.ensureHashes(limit, v.bs, &v.arenas)
	v.hitSlots, active = v.pool.prefix(s.hashes[:limit], v.hitSlots)
	return len(v.hitSlots), active
}

// promote hashes the blocks that became full and stores them in the pool.
func (v *VLLM) promote(s *seq) {
	if !v.caching {
		return
	}
	full := v.fullBlocks(s.computed)
	if full <= s.stored {
		return
	}
	s.ensureHashes(full, v.bs, &v.arenas)
	if v.pool.ev.withTokens {
		v.pool.ev.storing(s.tail, s.tailAt)
	}
	i := s.stored
	parent := int32(noSlot)
	if i > 0 {
		parent = s.blocks[i-1]
	}
	v.pool.storeRun(s.blocks[i:full], s.hashes[:full], s.locals[:full], i, parent)
	s.stored = full
}

type schedStatus uint8

const (
	schedOK schedStatus = iota
	schedNothing
	schedBlocked
	schedNoMemory
	schedPreemptedSelf
)

// schedule gives s up to the remaining budget of tokens, allocating blocks
// and preempting when allowed.
func (v *VLLM) schedule(s *seq, now float64, canPreempt bool, out *Output) schedStatus {
	length := s.length
	effective, hits := s.computed, 0
	if s.computed == 0 && len(s.blocks) == 0 {
		if v.hitsOf == s {
			// Admission has just walked s's prefix: nothing changed since.
			hits = len(v.hitSlots)
		} else {
			hits, _ = v.prefixHits(s)
		}
		effective = hits * v.bs
	}
	v.hitsOf = nil
	var tiers tierRun
	if v.pool.g2 != nil && s.computed == 0 && len(s.blocks) == 0 {
		// The prefix goes on in the tiers below: those blocks are copied
		// back into fresh GPU blocks rather than recomputed.
		tiers = v.pool.lookupTiers(s.hashes[hits : (s.length-1)/v.bs])
		effective += tiers.total() * v.bs
	}
	remaining := length - effective
	if remaining <= 0 {
		return v.unscheduled(s, hits, tiers, schedNothing)
	}
	// With chunked prefill off only the prompt must go in one pass; the
	// generated tokens a preempted request recomputes are chunked like
	// decode work. A prompt that can never fit one pass (a recompute that
	// lost the prefix hits it was admitted with) is chunked rather than
	// left to block the queue for ever.
	promptLeft := s.prompt - min(effective, s.prompt)
	if !v.chunked && promptLeft > v.budget && promptLeft <= v.maxBatched {
		return v.unscheduled(s, hits, tiers, schedBlocked)
	}
	desired := min(remaining, v.budget)
	if len(s.blocks) == 0 {
		v.blockRoom(s)
	}
	for _, slot := range v.hitSlots[:hits] {
		v.pool.acquire(slot)
		s.blocks = append(s.blocks, slot)
	}
	s.stored = max(s.stored, hits)
	need := v.blocksFor(effective + desired)
	for len(s.blocks) < need {
		if s.blocks = v.pool.allocN(s.blocks, need-len(s.blocks)); len(s.blocks) == need {
			break
		}
		if !canPreempt {
			v.freeBlocks(s)
			return v.unscheduled(s, hits, tiers, schedNoMemory)
		}
		if v.pool.withheld > 0 || v.noEvict {
			// The slots the allocation would take are lent to copies to
			// the host tier: s keeps what it has and waits for them to
			// land (KVBM blocks on the copy rather than preempt). The
			// no-evict policy's reservations count lent slots as coming
			// back, and make a shortfall unreachable otherwise; there too
			// a running request keeps what it has and waits.
			if v.noEvict && len(v.pool.lent) == 0 {
				v.noEvictShort++
			}
			v.waited = true
			return v.unscheduled(s, hits, tiers, schedNoMemory)
		}
		victim := v.victim()
		v.preempt(victim, now, out)
		if victim == s {
			return v.unscheduled(s, hits, tiers, schedPreemptedSelf)
		}
	}
	if tiers.total() > 0 {
		// Before the onboarded blocks are stored on the GPU: those staged
		// from disk or object storage are stored in the host tier first.
		v.pool.onboardTiers(s.hashes[hits:], tiers)
		v.onboardMs += float64(tiers.total())*v.onboardPerBlock +
			float64(tiers.g3)*v.stageG3PerBlock + float64(tiers.g4)*v.stageG4PerBlock
	}
	s.computed = effective + desired
	if !s.admitted {
		s.admitted = true
		s.cached = int32(effective)
		s.queued = float32(now - s.arrival)
	}
	// Most passes fill no block of s: the test is made here, not behind a
	// call, for every running request.
	if v.caching && v.fullBlocks(s.computed) > s.stored {
		v.promote(s)
	}

	v.budget -= desired
	v.passStart(s)
	s.passTokens += int32(desired)
	if remaining > 1 || s.out == 0 {
		s.passPrefill = true
		v.prefillToks += desired
		// Only prompt tokens are prefill work for the timing model: the
		// generated tokens a preempted request recomputes are not, and a
		// pass that schedules none of the prompt adds nothing to the batch.
		promptTokens := min(effective+desired, s.prompt) - min(effective, s.prompt)
		if !v.decodeWorker && promptTokens > 0 {
			s.passBatch = true
			s.passISL, s.passPrefix = int32(effective+promptTokens), int32(effective)
			v.batch++
			v.sumISL += float64(s.passISL)
			v.sumPrefix += float64(s.passPrefix)
		}
	} else {
		v.decodeToks += desired
	}
	return schedOK
}

// unscheduled returns st for a pass that did not schedule s, first
// releasing the run of its prompt (past its hits GPU hits) that the tiers
// below the GPU pool were to onboard: they are as they were.
func (v *VLLM) unscheduled(s *seq, hits int, tiers tierRun, st schedStatus) schedStatus {
	if tiers.total() > 0 {
		v.pool.releaseTiers(s.hashes[hits:], tiers)
	}
	return st
}

// decodeRun takes the decode steps of the running requests from i on
// while each is a plain one, and returns the first it did not take: the
// last token is all the request has to compute, its blocks have room for
// it, it fills no block, and the budget has a token left. That is the
// running phase's common case, done as schedule would do it, in a loop
// that calls nothing and keeps the pass's counts in registers; schedule
// takes the others. The block size must be a power of two (bsShift >= 0).
func (v *VLLM) decodeRun(i int) int {
	running, shift, caching := v.active, uint(v.bsShift)&63, v.caching
	budget, toks, pass := v.budget, v.decodeToks, v.passID
	up := v.bs - 1
	for ; i < len(running) && budget > 0; i++ {
		s := running[i]
		if s.state != stRunning || s.length-s.computed != 1 || s.out <= 0 || !s.admitted ||
			(s.length+up)>>shift > len(s.blocks) || (caching && s.length>>shift > s.stored) {
			break
		}
		s.computed = s.length
		budget--
		if s.passID != pass {
			s.passID = pass
			s.passTokens, s.passPrefill, s.passBatch = 0, false, false
		}
		s.passTokens++
		toks++
	}
	v.budget, v.decodeToks = budget, toks
	return i
}

// passStart clears s's contributions to an earlier pass when this pass
// schedules it first.
//
// passISL and passPrefix are left as they are: they are read only while
// passBatch is set, and set whenever it is. A decode step then writes
// nothing past the seq's first cache line.
func (v *VLLM) passStart(s *seq) {
	if s.passID != v.passID {
		s.passID = v.passID
		s.passTokens, s.passPrefill, s.passBatch = 0, false, false
	}
}

// victim picks the running request to preempt: the newest (LIFO) or the
// oldest (FIFO) still running.
func (v *VLLM) victim() *seq {
	if v.fifo {
		for _, s := range v.running {
			if s.state == stRunning {
				return s
			}
		}
		return nil
	}
	for i := len(v.running) - 1; i >= 0; i-- {
		if s := v.running[i]; s.state == stRunning {
			return s
		}
	}
	return nil
}

// preempt frees s's KV and sends it to the front of the waiting queue. It
// keeps its generated tokens and recomputes them on readmission; whatever it
// was given earlier in this pass goes back to the budget.
func (v *VLLM) preempt(s *seq, now float64, out *Output) {
	if s.coasting {
		v.uncoastCharged(s)
	}
	if v.noEvict {
		v.runTail -= v.tailOf(s)
	}
	n := len(s.blocks)
	v.freeBlocks(s)
	if s.passID == v.passID && s.passTokens > 0 {
		v.budget += int(s.passTokens)
		if s.passPrefill {
			v.prefillToks -= int(s.passTokens)
			if s.passBatch {
				v.batch--
				v.sumISL -= float64(s.passISL)
				v.sumPrefix -= float64(s.passPrefix)
			}
		} else {
			v.decodeToks -= int(s.passTokens)
		}
		s.passTokens = 0
	}
	s.state = stWaiting
	s.preempts++
	v.waiting.pushFront(s)
	v.preemptions++
	v.preempted = true
	out.Events = append(out.Events, Event{Kind: EventPreempted, At: now, RequestID: s.id, Blocks: n})
}

func (v *VLLM) reject(s *seq, now float64, code RejectCode, reason string, out *Output) {
	v.waiting.popFront()
	out.Rejections = append(out.Rejections, Rejection{RequestID: s.id, At: now, Code: code, Reason: reason})
	v.recycle(s)
}

// Pass implements Scheduler.
func (v *VLLM) Pass(now float64, out *Output) PassResult {
	v.pool.beginPass()
	res := v.pass(now, out)
	v.pool.vl.end()
	return res
}

func (v *VLLM) pass(now float64, out *Output) PassResult {
	v.pool.ev.reset()
	if v.pool.timed {
		v.pool.clock = now
		v.pool.landOffloads(now)
	}
	v.passID++
	v.budget = v.maxBatched
	v.preempted, v.waited = false, false
	v.batch, v.sumISL, v.sumPrefix = 0, 0, 0
	v.prefillToks, v.decodeToks = 0, 0
	v.onboardMs = 0
	if len(v.done) > 0 {
		out.Completions = append(out.Completions, v.done...)
		v.done = v.done[:0]
	}
	if len(v.rejected) > 0 {
		out.Rejections = append(out.Rejections, v.rejected...)
		v.rejected = v.rejected[:0]
	}
	// Activated destinations take the free running slots first: their KV
	// is already in place, and each only needs its next token.
	for v.activated.len() > 0 && (v.slotReserve || len(v.running) < v.maxSeqs) {
		s := v.activated.popFront()
		if v.noEvict {
			v.destTail -= v.tailOf(s)
		}
		s.state = stRunning
		v.run(s)
	}
	if v.coastN > 0 || v.coastQ.n > 0 {
		v.coastStart()
	}

	// Running phase, in order, of the requests that do not coast.
	// Preempted entries stay in place as non-running until compaction.
	for i := 0; i < len(v.active) && v.budget > 0; i++ {
		if v.bsShift >= 0 {
			if i = v.decodeRun(i); i == len(v.active) || v.budget <= 0 {
				break
			}
		}
		if s := v.active[i]; s.state == stRunning {
			if v.noEvict {
				// The blocks the step takes come off what s may still take.
				n := len(s.blocks)
				v.schedule(s, now, true, out)
				v.runTail -= len(s.blocks) - n
			} else {
				v.schedule(s, now, true, out)
			}
		}
	}
	// Between passes every request in the running set runs (a finish
	// compacts it, a cancel takes its request out): only a preemption
	// leaves others.
	if v.preempted {
		v.compactRunning()
	}

	// Waiting phase, FIFO, only when nobody was preempted: a preemption
	// means the pool is short, and the victim must not be overtaken.
	if !v.preempted {
		v.admit(now, out)
		if v.slotReserve {
			v.admitting = true
			v.reservePending(now, &out.Events)
			v.admitting = false
		}
	}

	// Emission: every running request whose KV covers its whole sequence
	// produces one token, including prompts that finished prefill just now.
	// The coasting requests are ready too, and count by their sums.
	ready, ctx := v.ready[:0], 0
	for _, s := range v.active {
		if s.computed >= s.length {
			ready = append(ready, s)
			ctx += s.length
		}
	}
	v.ready = ready
	nReady := len(ready) + v.coastN
	ctx += v.coastLen + v.coastN*int(v.cpass)
	if v.prefillToks+v.decodeToks == 0 && nReady == 0 {
		v.finishTruncated(now, out)
		v.pool.ev.flushTo(out)
		reserved := v.reservePending(now, &out.Events)
		if v.preempted || reserved || len(out.Completions)+len(out.Rejections) > 0 {
			return PassChanged
		}
		return PassIdle
	}

	var prefillMs, decodeMs float64
	if v.batch > 0 && !v.decodeWorker {
		prefillMs = v.model.PrefillMs(v.batch, meanLen(v.sumISL, v.batch, v.compat), meanLen(v.sumPrefix, v.batch, v.compat))
	}
	if nReady > 0 && !v.prefillWorker {
		d := v.model.DecodeMs(nReady, float64(v.pool.active*v.bs), float64(v.total*v.bs),
			meanLen(float64(ctx), nReady, v.compat))
		// Floor first, then divide, as Dynamo does: decode_speedup_ratio
		// may take a step under 1 ms.
		decodeMs = max(perf.MinDecodeMs, d) / v.decodeSpeedup
	}
	// Blocks copied back from the host tier arrive before the forward
	// pass that reads them: the copy is part of the pass's prefill time.
	prefillMs += v.onboardMs
	end := now + prefillMs + decodeMs
	out.Ran = true
	out.End = end
	out.PrefillMs, out.DecodeMs = prefillMs, decodeMs
	out.PrefillTokens, out.DecodeTokens = v.prefillToks, v.decodeToks

	finished := false
	later := out.firstTokens
	for _, s := range v.ready {
		if later && s.out > 0 {
			// generate, for a token out does not report: it is counted,
			// and stored when a block hash reads it (fillTail).
			s.length++
			s.out++
		} else {
			s.generate(end, out)
		}
		if s.out >= s.maxOut || s.length >= v.maxModelLen {
			if v.noEvict {
				v.runTail -= v.tailOf(s)
			}
			v.finish(s, end, out)
			finished = true
		}
	}
	if finished {
		v.compactRunning()
	}
	// Every coasting request generated its token.
	v.cpass++
	// No request starts coasting in a pass that preempted: the preemption
	// may have given back budget after a request before it was cut short
	// (vllm_coast.go). Nor in one where a running request waited for
	// blocks: it took none of the budget, and asks for more than a step
	// when it runs again.
	if v.canCoast && later && !v.preempted && !v.waited {
		coasted := false
		for _, s := range v.ready {
			if s.state == stRunning && v.coast(s) {
				coasted = true
			}
		}
		if coasted {
			v.active = slices.DeleteFunc(v.active, func(s *seq) bool { return s.coasting })
		}
	}
	v.finishTruncated(end, out)
	v.pool.ev.flushTo(out)
	// The pass ends with its finished requests' blocks freed: the
	// destinations waiting for blocks try again then.
	v.passEnd = end
	v.reservePending(end, &out.Events)
	return PassRan
}

// finishTruncated completes, at the pass end, the requests the waiting
// phase found too long for the pool, with the tokens they already streamed.
// They hold no blocks (a preemption freed them), so under the Hold policy
// the hold is empty.
func (v *VLLM) finishTruncated(end float64, out *Output) {
	for i, s := range v.truncated {
		v.finish(s, end, out)
		v.truncated[i] = nil
	}
	v.truncated = v.truncated[:0]
}

// admit runs the waiting phase. Refusals and reservations cost no tokens,
// so they go on when the budget is spent; only scheduling needs budget.
//
// Only a fresh request (no output yet, never preempted) is refused. A
// request that has streamed tokens and, after a preemption, no longer fits
// the pool at all is finished as a Truncated completion instead: its
// client already holds part of an answer.
func (v *VLLM) admit(now float64, out *Output) {
	for v.waiting.len() > 0 && len(v.running)+v.slotsReserved() < v.maxSeqs {
		s := v.waiting.front()
		fresh := s.out == 0 && s.preempts == 0
		if fresh && v.pending.len() > 0 && !v.slotReserve {
			// A destination is waiting for its reservation: fresh
			// admissions pause so they do not take what it waits for, as
			// in Dynamo.
			return
		}
		length := s.length
		if s.prompt >= v.maxModelLen {
			v.reject(s, now, RejectTooLong, fmt.Sprintf("prompt of %d tokens reaches max_model_len %d", s.prompt, v.maxModelLen), out)
			continue
		}
		if v.noEvict && fresh && s.prompt >= v.total*v.bs {
			why := v.noRoomToDecode(s)
			v.reject(s, now, why.code, why.reason, out)
			continue
		}
		blocks := ceilDiv(length, v.bs)
		if blocks > v.total {
			if s.out > 0 {
				v.waiting.popFront()
				v.truncated = append(v.truncated, s)
				continue
			}
			v.reject(s, now, RejectNeverFits, fmt.Sprintf("sequence of %d tokens needs %d blocks of %d but num_gpu_blocks is %d",
				length, blocks, v.bs, v.total), out)
			continue
		}
		// Unless fewer hits could refuse it, a request that lacked blocks
		// returns here as it would after the walk.
		if !v.noEvict && (v.chunked || !fresh) && v.stillLacks(&v.admitLack, s) {
			return
		}
		hits, activeHits := v.prefixHits(s)
		if uncached := s.prompt - min(hits*v.bs, s.prompt); fresh && !v.chunked && uncached > v.maxBatched {
			v.reject(s, now, RejectBudget, fmt.Sprintf("%d uncached prompt tokens exceed max_num_batched_tokens %d with chunked prefill off",
				uncached, v.maxBatched), out)
			continue
		}
		if v.budget <= 0 {
			return
		}
		// Only hits on active blocks are credited: inactive ones may be
		// evicted by the very allocation that admits the request.
		if v.noEvict {
			if v.tailOf(s)-activeHits > v.noEvictRoom() {
				return
			}
		} else if lack := blocks - activeHits - (v.total - v.pool.active); lack > 0 {
			v.lacked(&v.admitLack, s, blocks, lack)
			return
		}
		v.unlack(&v.admitLack)
		v.hitsOf = s
		if v.schedule(s, now, false, out) != schedOK {
			return
		}
		v.waiting.popFront()
		s.state = stRunning
		v.run(s)
	}
}

// reserve admits the destination at the head of the pending queue as a
// reservation: blocks for its whole prompt, reusing resident prefix blocks.
// Nothing is computed, so no token budget is used. Like any admission it
// needs a free running slot, but it does not keep one. It reports false,
// leaving the head in place, when the slot or the blocks are not
// available. The destination misses whole blocks: MissingTokens is the
// missing blocks times block_size, the footprint a transfer moves.
func (v *VLLM) reserve(s *seq, now float64, events *[]Event) bool {
	// Dynamo admits a destination like a waiting request, so only while a
	// running slot is free; but the reservation then keeps none.
	if len(v.running)+v.slotsReserved() >= v.maxSeqs {
		return false
	}
	if v.noEvict {
		// Set aside to the last token, with no credit for a resident
		// prefix (which is still reused below).
		if v.tailOf(s) > v.noEvictRoom() {
			return false
		}
	} else if v.stillLacks(&v.reserveLack, s) {
		return false
	}
	blocks := ceilDiv(s.length, v.bs)
	hits, activeHits := v.prefixHits(s)
	// As for any admission, only active prefix hits are credited: the
	// allocation below may evict inactive ones.
	if lack := blocks - activeHits - (v.total - v.pool.active); !v.noEvict && lack > 0 {
		v.lacked(&v.reserveLack, s, blocks, lack)
		return false
	}
	v.unlack(&v.reserveLack)
	v.blockRoom(s)
	for _, slot := range v.hitSlots[:hits] {
		v.pool.acquire(slot)
		s.blocks = append(s.blocks, slot)
	}
	if s.blocks = v.pool.allocN(s.blocks, blocks-len(s.blocks)); len(s.blocks) < blocks {
		// Short only of slots lent to copies to the host tier (those it
		// evicted, or, under guaranteed_no_evict, those the check counts
		// as coming back): give back what it took and wait for them.
		v.freeBlocks(s)
		return false
	}
	s.stored = hits
	s.cached = int32(hits * v.bs)
	s.queued = float32(now - s.arrival)
	v.pending.popFront()
	s.state = stReserved
	if v.noEvict {
		v.destTail += v.tailOf(s)
	}
	v.noteReserved(now, s.id, len(s.blocks), (blocks-hits)*v.bs, events)
	return true
}

// slotsReserved is how many running slots destinations take before they
// run: none, unless reserve_takes_slot gives each reservation one.
func (v *VLLM) slotsReserved() int {
	if !v.slotReserve {
		return 0
	}
	return v.reservedReqs + v.activated.len()
}

// finish ends s after its last token: its blocks are released, or held for a
// handoff under the Hold policy. It is Truncated when a length limit, not
// MaxTokens, ended it.
func (v *VLLM) finish(s *seq, end float64, out *Output) {
	c := s.completion(end)
	c.Preemptions, c.Held, c.Truncated = int(s.preempts), s.policy == Hold, s.out < s.maxOut || s.clamped
	out.Completions = append(out.Completions, c)
	if s.policy == Hold {
		v.pool.holdAll(s.blocks)
		s.state = stHeld
		v.startHold(end, s.id, len(s.blocks), &out.Events)
		return
	}
	v.freeBlocks(s)
	v.recycle(s)
}

// compactRunning drops requests that left the running set, keeping order.
func (v *VLLM) compactRunning() {
	v.running = compactSeqs(v.running)
	v.active = compactSeqs(v.active)
}

// compactSeqs drops from ss the requests no longer running, keeping order.
func compactSeqs(ss []*seq) []*seq {
	j := 0
	for _, s := range ss {
		if s.state == stRunning {
			ss[j] = s
			j++
		}
	}
	clear(ss[j:])
	return ss[:j]
}

// run adds s to the end of the running set.
func (v *VLLM) run(s *seq) {
	v.ranks++
	s.rank = v.ranks
	v.running = append(v.running, s)
	v.active = append(v.active, s)
	if v.noEvict {
		v.runTail += v.tailOf(s)
	}
}

// seqDeque is a ring buffer of seqs: preempted requests go to the front,
// arrivals to the back.
type seqDeque struct {
	buf  []*seq
	head int
	n    int
}

func (d *seqDeque) len() int { return d.n }

func (d *seqDeque) grow() {
	nb := make([]*seq, max(16, 2*len(d.buf)))
	for i := 0; i < d.n; i++ {
		nb[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = nb, 0
}

func (d *seqDeque) pushBack(s *seq) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.n)%len(d.buf)] = s
	d.n++
}

func (d *seqDeque) pushFront(s *seq) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = s
	d.n++
}

func (d *seqDeque) front() *seq { return d.buf[d.head] }

func (d *seqDeque) popFront() *seq {
	s := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.n--
	return s
}

func (d *seqDeque) at(i int) *seq { return d.buf[(d.head+i)%len(d.buf)] }

// remove deletes s, keeping the order of the rest.
func (d *seqDeque) remove(s *seq) {
	for i := 0; i < d.n; i++ {
		if d.at(i) != s {
			continue
		}
		for j := i; j < d.n-1; j++ {
			d.buf[(d.head+j)%len(d.buf)] = d.at(j + 1)
		}
		d.buf[(d.head+d.n-1)%len(d.buf)] = nil
		d.n--
		return
	}
}
