package kv

// EventKind says what an Event reports.
type EventKind uint8

const (
	// Stored reports blocks newly written to a worker's pool, in prefix order.
	Stored EventKind = iota + 1
	// Removed reports blocks evicted from a worker's pool.
	Removed
	// Cleared reports that a worker dropped every block it had.
	Cleared
)

// String returns the lowercase name used in JSON and logs.
func (k EventKind) String() string {
	switch k {
	case Stored:
		return "stored"
	case Removed:
		return "removed"
	case Cleared:
		return "cleared"
	}
	return "unknown"
}

// Block is one stored block: its sequence hash (the worker's key for it) and
// its local hash (the indexer's tree key).
type Block struct {
	Hash       SeqHash   `json:"block_hash"`
	TokensHash LocalHash `json:"tokens_hash"`
}

// Event is one change to a worker's pool. Event ids are monotonic per worker
// (and dp rank), starting at 0, so a consumer can detect gaps.
type Event struct {
	ID     uint64    `json:"event_id"`
	DPRank uint32    `json:"dp_rank"`
	Kind   EventKind `json:"-"`
	// Parent is the sequence hash of the block preceding Blocks[0]; HasParent
	// is false when Blocks[0] is the first block of a sequence. (Stored only.)
	Parent    SeqHash `json:"-"`
	HasParent bool    `json:"-"`
	// Blocks are the stored blocks, in prefix order. (Stored only.)
	Blocks []Block `json:"-"`
	// Removed are the sequence hashes of evicted blocks. (Removed only.)
	RemovedHashes []SeqHash `json:"-"`
}

// WorkerEvent is an Event tagged with the worker that published it, as a
// router consumes it.
type WorkerEvent struct {
	WorkerID uint64
	Event    Event
}

// Sink receives KV events. Implementations must not retain ev.Blocks or
// ev.RemovedHashes past the call unless they copy them.
type Sink interface {
	KVEvent(workerID uint64, ev Event)
}
