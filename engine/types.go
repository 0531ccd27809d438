package engine

import "github.com/kvstrand/mocker/kv"

// Request is one generation request as a worker sees it. The worker keeps
// what it needs of Tokens and the hashes at Submit (or Reserve), so callers
// may reuse the slices afterwards.
type Request struct {
	// ID names the request in every output; it must be unique among the
	// requests a worker currently knows (waiting, running or held).
	ID uint64
	// Tokens is the prompt, from token Skip on. The prompt must not be
	// empty.
	Tokens []uint32
	// Skip, when above 0, is how many of the prompt's first tokens Tokens
	// leaves out: the prompt is Skip+len(Tokens) tokens long. A worker
	// reads no token of a complete block whose hash it is given, so a
	// caller that gives Hashes of every complete block may leave out
	// those blocks' tokens (Skip at most len(Hashes.Seqs) ×
	// Hashes.BlockSize) and keep only the rest: a long prompt then costs
	// its hashes and its last partial block, not a copy of every token. A
	// worker that would hash the prompt itself (prefix caching on with
	// another block size) or report the token ids of the blocks it stores
	// (Worker.RecordKVTokens) refuses such a request.
	Skip int
	// Hashes, when given, are the hashes of the prompt's complete blocks. A
	// caller that hashed the prompt already (to route it) passes them on,
	// so that a worker whose block size is Hashes.BlockSize need not hash
	// it again; a worker with another block size, or given hashes that do
	// not cover every complete block, hashes Tokens itself. A worker that
	// uses them reads them, without copying, for as long as it knows the
	// request, and never writes them: the caller must leave them unchanged
	// until then. (Tokens it copies what it keeps of, at once.)
	Hashes *kv.Hashes
	// MaxTokens caps the generated tokens. Values below 1 are treated as 1
	// (Dynamo completes such a request with none, docs/fidelity.md item 5),
	// and prefill workers produce exactly one token, except under
	// dynamo_compat, which generates MaxTokens as Dynamo's core does.
	MaxTokens int
	// Priority orders an SGLang worker's waiting queue under dynamo_compat,
	// as Dynamo main does: higher values first (SGLang's default
	// direction), arrival order among equals. Otherwise it is ignored.
	Priority int
}

// PromptLen is the prompt's length in tokens, those Skip leaves out
// included.
func (r *Request) PromptLen() int { return r.Skip + len(r.Tokens) }

// CompletionPolicy says what happens to a request's KV blocks when it
// finishes.
type CompletionPolicy uint8

const (
	// Release frees the blocks at completion (aggregated serving, decode side).
	Release CompletionPolicy = iota
	// Hold keeps the blocks after completion for a disaggregated handoff: the
	// running slot is freed, but the blocks stay allocated, count in the
	// capacity view and fill the pool until ReleaseHeld.
	Hold
)

// String returns "release" or "hold".
func (p CompletionPolicy) String() string {
	if p == Hold {
		return "hold"
	}
	return "release"
}

// Outcome says how a hold ended.
type Outcome uint8

const (
	// Transferred: the decode side received the KV.
	Transferred Outcome = iota + 1
	// Aborted: the handoff was given up (timeout, cancellation, failure).
	Aborted
)

// String returns the outcome label used in metrics tags.
func (o Outcome) String() string {
	switch o {
	case Transferred:
		return "transferred"
	case Aborted:
		return "aborted"
	}
	return "unknown"
}

// Token is one generated token, stamped with the modeled end of the pass that
// produced it.
type Token struct {
	RequestID uint64
	Token     uint32
	// Index is the token's position in the output, from 0.
	Index int
	At    float64
}

// Completion reports a request that produced its last token.
type Completion struct {
	RequestID uint64
	// At is the modeled end of the pass that produced the last token, or
	// for a Truncated request that outgrew the pool, of the pass that found
	// it could not continue.
	At float64
	// Arrival is the modeled time of Submit.
	Arrival float64
	// QueueMs is the request's time in the queue: from Arrival to the
	// start of the pass that first scheduled it (a destination's: that
	// reserved it), in modeled ms to float32 precision.
	QueueMs float64
	// FirstTokenAt is the modeled end of the pass that produced token 0.
	FirstTokenAt float64
	PromptTokens int
	OutputTokens int
	// CachedTokens is the prefix credited at the request's first admission
	// (what an OpenAI response reports as cached_tokens).
	CachedTokens int
	Preemptions  int
	// Held is true when the request's blocks stay allocated (Hold policy);
	// an EventHoldStarted accompanies it.
	Held bool
	// Truncated is true when the request stopped before MaxTokens because
	// its sequence hit a length limit: max_model_len, or a pool too small
	// to hold it once a preemption made it recompute (a request that has
	// streamed tokens is finished short rather than rejected).
	Truncated bool
}

// RejectCode says why a request was refused, so callers can branch on it.
type RejectCode uint8

const (
	// RejectTooLong: the prompt is at least max_model_len tokens.
	RejectTooLong RejectCode = iota + 1
	// RejectNeverFits: the prompt needs more blocks than the pool has. Only
	// a request that has produced no token is refused this way; one that
	// outgrows the pool later completes Truncated.
	RejectNeverFits
	// RejectBudget: with chunked prefill off, the uncached prompt of a fresh
	// request exceeds max_num_batched_tokens, so no pass could ever schedule
	// it.
	RejectBudget
	// RejectHandoffTimeout: a destination-first SGLang prefill waited
	// handoff_session_timeout_ms in its bootstrap queue without its decode
	// side ever reserving (no DestinationReady), and was dropped having
	// computed and held nothing.
	RejectHandoffTimeout
)

// String returns a short label for the code.
func (c RejectCode) String() string {
	switch c {
	case RejectTooLong:
		return "too_long"
	case RejectNeverFits:
		return "never_fits"
	case RejectBudget:
		return "budget"
	case RejectHandoffTimeout:
		return "handoff_timeout"
	}
	return "unknown"
}

// Rejection reports a request the worker refused. No token was or will be
// produced for it after the rejection.
type Rejection struct {
	RequestID uint64
	At        float64
	Code      RejectCode
	// Reason explains the refusal with the numbers involved.
	Reason string
}

// EventKind names a lifecycle transition.
type EventKind uint8

const (
	// EventHoldStarted: a finished request kept its blocks (Hold policy).
	EventHoldStarted EventKind = iota + 1
	// EventHoldReleased: a hold ended; Outcome and DurationMs say how and
	// after how long.
	EventHoldReleased
	// EventPreempted: a running request lost its KV and went back to waiting.
	EventPreempted
	// EventCancelled: the caller withdrew a waiting or running request.
	EventCancelled
	// EventTransferStart: the decode side claimed a held source, which moves
	// from SourceHeld to Transferring. TransferTokens and DelayMs give the
	// charge and the modeled transfer time; DurationMs is how long the
	// source had been held until then.
	EventTransferStart
	// EventDecodeWaitStart: a destination request began waiting for remote
	// KV (Reserve).
	EventDecodeWaitStart
	// EventDecodeReserved: the destination's scheduler admitted the request
	// as a reservation of Blocks blocks (KV only, no sequence slot).
	// MissingTokens is the footprint of the prompt blocks not already
	// resident, in whole blocks; DurationMs is the wait.
	EventDecodeReserved
	// EventDestinationActivated: the transfer was acknowledged and the
	// reservation became a running request. DurationMs is the time since
	// the reservation.
	EventDestinationActivated
	// EventDestinationCancelled: a waiting or reserved destination was
	// dropped (transfer abort, caller cancel, or refusal by admission, which
	// also emits a Rejection) and its blocks freed. DurationMs is the time
	// since the reservation, or since the wait began when it never got one.
	EventDestinationCancelled
)

// String returns the event name used in the forensic log.
func (k EventKind) String() string {
	switch k {
	case EventHoldStarted:
		return "prefill_kv_pin_start"
	case EventHoldReleased:
		return "prefill_kv_pin_end"
	case EventPreempted:
		return "preempted"
	case EventCancelled:
		return "cancelled"
	case EventTransferStart:
		return "transfer_start"
	case EventDecodeWaitStart:
		return "decode_kv_wait_start"
	case EventDecodeReserved:
		return "decode_kv_reserved"
	case EventDestinationActivated:
		return "decode_kv_activated"
	case EventDestinationCancelled:
		return "decode_kv_cancelled"
	}
	return "unknown"
}

// EndReason says what ended a hold, finer than its Outcome, for the
// forensic log.
type EndReason uint8

const (
	// EndReleased: the caller called ReleaseHeld.
	EndReleased EndReason = iota + 1
	// EndTransferComplete: the modeled transfer finished (Transferred).
	EndTransferComplete
	// EndAbortTimeout: kv_transfer_abort_timeout_ms passed since the hold
	// began with no transfer started (Aborted).
	EndAbortTimeout
	// EndSessionTimeout: handoff_session_timeout_ms passed since the hold
	// began with no transfer started (Aborted).
	EndSessionTimeout
	// EndCancelled: the caller cancelled the held request (Aborted).
	EndCancelled
)

// String returns the reason label used in the forensic log.
func (r EndReason) String() string {
	switch r {
	case EndReleased:
		return "released"
	case EndTransferComplete:
		return "transfer_complete"
	case EndAbortTimeout:
		return "abort_timeout"
	case EndSessionTimeout:
		return "session_timeout"
	case EndCancelled:
		return "cancelled"
	}
	return "unknown"
}

// Event is one lifecycle transition, stamped with modeled time.
type Event struct {
	Kind      EventKind
	At        float64
	RequestID uint64
	// Blocks is the number of blocks the request held (hold and transfer
	// events), reserved (destination events) or lost (preemption; SGLang
	// leaves out cached prefix pages another request still uses).
	Blocks int
	// Outcome and Reason are set on EventHoldReleased.
	Outcome Outcome
	Reason  EndReason
	// DurationMs is the hold's length on EventHoldReleased (the
	// prefill_kv_pin_end duration_ms) and an elapsed time on the handoff
	// events, as each kind documents.
	DurationMs float64
	// TransferTokens and DelayMs are set on EventTransferStart.
	TransferTokens int
	DelayMs        float64
	// MissingTokens is set on EventDecodeReserved: what a
	// destination_missing transfer is charged for, the missing prompt
	// blocks times block_size (a transfer moves whole blocks, as Dynamo
	// charges it: 10 tokens missing at block_size 4 move 12).
	MissingTokens int
}

// Metrics is a worker's occupancy and counters at one instant.
//
// Two views of occupancy are kept apart on purpose. The capacity view
// (ActiveBlocks, InactiveBlocks, FreeBlocks) counts every allocated block,
// held ones included: it is what admission and preemption see. The
// router-facing view (RouterActiveBlocks) leaves out blocks referenced only by
// holds, unless Args.RouterLoadIncludesHeld, because a held block is not load
// a new request competes with for compute.
type Metrics struct {
	TotalBlocks    int
	ActiveBlocks   int
	InactiveBlocks int
	FreeBlocks     int
	// HeldBlocks counts blocks whose every reference is a hold: the blocks
	// that releasing all holds would return to the inactive pool.
	HeldBlocks         int
	RouterActiveBlocks int
	Running            int
	// Waiting counts queued requests: fresh, preempted, a destination not
	// yet reserved, and (SGLang) a prefill in its bootstrap queue. A
	// reserved destination awaiting Activate is in ReservedRequests
	// instead, except under dynamo_compat, where Waiting is DynamoWaiting.
	Waiting int
	// HeldRequests counts source holds, transferring ones included.
	HeldRequests int
	// TransferringRequests counts holds whose transfer has started.
	TransferringRequests int
	// ReservedRequests counts destination reservations not yet activated.
	// As in Dynamo and vLLM they hold KV but no max_num_seqs slot; an
	// activated one waits for a slot (in Waiting) before it runs.
	ReservedRequests int
	// ReservedBlocks counts the blocks those reservations reference, per
	// reservation. They are active blocks, so they count in the capacity
	// view and in the router-facing view (decode load) alike.
	ReservedBlocks int
	Preemptions    uint64
	// DynamoWaiting is Waiting as Dynamo's waiting_requests counts it:
	// reserved destinations awaiting Activate included (Waiting +
	// ReservedRequests). Compare it with Dynamo's metric; mocker's Waiting
	// keeps reservations apart because they wait for a transfer, not for
	// the scheduler. Under dynamo_compat Waiting reports this figure.
	DynamoWaiting int
	// Passes counts forward passes that did work.
	Passes uint64
	// G2Blocks and G2Capacity are the host offload tier's occupancy and
	// size in blocks (num_g2_blocks; 0 without a tier). G2Offloaded counts
	// the blocks the GPU pool evicted into it, G2Onboarded those copied
	// back on a prefix hit instead of recomputed. Left out of the JSON
	// (a remote worker's reports) while 0.
	G2Blocks    int    `json:",omitempty"`
	G2Capacity  int    `json:",omitempty"`
	G2Offloaded uint64 `json:",omitempty"`
	G2Onboarded uint64 `json:",omitempty"`
	// G3Blocks and G3Capacity are the disk tier's occupancy and size
	// (num_g3_blocks; 0 without one), G3Offloaded the blocks copied to it
	// from the host tier, G3Onboarded those a prefix hit found there and
	// staged back through the host tier. G4Blocks is object storage's
	// occupancy (enable_g4_storage; it has no bound), G4Onboarded the
	// blocks a prefix hit found there. G2Onboarded counts the hits found
	// in the host tier itself.
	G3Blocks    int    `json:",omitempty"`
	G3Capacity  int    `json:",omitempty"`
	G3Offloaded uint64 `json:",omitempty"`
	G3Onboarded uint64 `json:",omitempty"`
	G4Blocks    int    `json:",omitempty"`
	G4Onboarded uint64 `json:",omitempty"`
}

// Output is what one Step produced. It is owned by the Worker: a pass's
// Output stays intact until the first Step at or after its End (Steps in
// between, for deadlines or input events, use another buffer), and any other
// Output is valid until the next Step. Copy what must outlive it (KVEvents'
// Blocks and RemovedHashes included).
type Output struct {
	// Start and End bound the pass in modeled ms; End == Start when no
	// forward pass ran (only events were flushed).
	Start, End float64
	// Ran is true when a forward pass computed or emitted tokens.
	Ran       bool
	PrefillMs float64
	DecodeMs  float64
	// PrefillTokens and DecodeTokens are the tokens scheduled this pass.
	PrefillTokens int
	DecodeTokens  int

	// Tokens are the tokens generated, one per request the pass ran to
	// the end of its sequence; only first tokens after
	// Worker.ReportFirstTokensOnly.
	Tokens      []Token
	Completions []Completion
	Rejections  []Rejection
	// Events are lifecycle transitions in time order, each with its own
	// time: those caused by inputs and handoff deadlines since the previous
	// Step come first (they may precede Start), then the pass's. The Virtual
	// and Live drivers deliver the first group at once in an Output of its
	// own (Ran false, End == Start), and the pass's Output at its End with
	// the pass's events only.
	Events   []Event
	KVEvents []kv.Event
	// KVTokens are the token ids of the blocks KVEvents' Stored events
	// of the GPU medium store, block_size per block, in the order of the
	// events and of their Blocks (a Stored event of the host tier, CPU,
	// has none); empty unless the worker was told to record them
	// (Worker.RecordKVTokens).
	KVTokens []uint32
	// Metrics is the worker's state after the pass.
	Metrics Metrics

	lead int // leading Events that precede the pass
	// firstTokens: Tokens reports first tokens only (kept by reset).
	firstTokens bool
	// kvOmitted: the pass changed the cache, and KVEvents omits what it
	// would have announced (Worker.OmitKVEvents).
	kvOmitted bool
}

// Duration is the modeled length of the pass in ms.
func (o *Output) Duration() float64 { return o.End - o.Start }

func (o *Output) empty() bool {
	return !o.Ran && len(o.Tokens) == 0 && len(o.Completions) == 0 && len(o.Rejections) == 0 &&
		len(o.Events) == 0 && len(o.KVEvents) == 0 && !o.kvOmitted
}

func (o *Output) reset(now float64) {
	o.Start, o.End = now, now
	o.Ran = false
	o.PrefillMs, o.DecodeMs = 0, 0
	o.PrefillTokens, o.DecodeTokens = 0, 0
	o.Tokens = o.Tokens[:0]
	o.Completions = o.Completions[:0]
	o.Rejections = o.Rejections[:0]
	o.Events = o.Events[:0]
	o.KVEvents = o.KVEvents[:0]
	o.KVTokens = nil
	o.kvOmitted = false
	o.lead = 0
}

// splitLead prepares a driver's delivery of o, a pass in flight: lead gets
// the events that precede the pass (false when there are none), to deliver
// at once, and rest gets the pass with its own events only, to deliver at
// its End. Both share o's buffers and stay valid as long as o.
func (o *Output) splitLead(lead, rest *Output) bool {
	if o.lead == 0 {
		return false
	}
	*lead = Output{Start: o.Start, End: o.Start, Events: o.Events[:o.lead], Metrics: o.Metrics}
	*rest = *o
	rest.Events = o.Events[o.lead:]
	rest.lead = 0
	return true
}
