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

// Medium is the KV tier an event's blocks are in. Its zero value is the
// GPU pool, so an event that names none is a GPU event, as every event was
// before a worker had a lower tier.
type Medium uint8

const (
	// MediumGPU is the GPU pool (G1): the blocks a kv router indexes.
	MediumGPU Medium = iota
	// MediumCPU is the host tier (G2) below it: blocks the GPU pool
	// evicted and copied to host memory, which a prefix hit copies back.
	MediumCPU
	// MediumDisk is the disk tier (G3) below the host tier: the blocks
	// the host tier took in, copied on to local disk.
	MediumDisk
	// MediumExternal is the object storage tier (G4): the blocks the host
	// tier took in, copied on to remote storage.
	MediumExternal

	// NumMedia is how many media there are.
	NumMedia = iota
)

// String returns the name a KV event gives the medium: "GPU" or "CPU", as
// vLLM's events name them, "DISK" or "EXTERNAL" for the tiers below, names
// Dynamo's router reads as its disk and external tiers.
func (m Medium) String() string {
	switch m {
	case MediumGPU:
		return "GPU"
	case MediumCPU:
		return "CPU"
	case MediumDisk:
		return "DISK"
	case MediumExternal:
		return "EXTERNAL"
	}
	return "unknown"
}

// ParseMedium is the Medium String names, "" being the GPU pool.
func ParseMedium(s string) (Medium, bool) {
	switch s {
	case "", "GPU":
		return MediumGPU, true
	case "CPU":
		return MediumCPU, true
	case "DISK":
		return MediumDisk, true
	case "EXTERNAL":
		return MediumExternal, true
	}
	return 0, false
}

// Block is one stored block: its sequence hash (the worker's key for it) and
// its local hash (the indexer's tree key).
type Block struct {
	Hash       SeqHash   `json:"block_hash"`
	TokensHash LocalHash `json:"tokens_hash"`
}

// Event is one change to a worker's pool. Event ids are monotonic per worker
// (and dp rank and medium), starting at 0, so a consumer can detect gaps.
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
	// Medium is the tier the blocks were stored in or removed from.
	// Events of a lower tier (MediumCPU and below) are numbered apart from the GPU
	// pool's, each tier's ids monotonic from 0, so a consumer that keeps
	// to the GPU pool's events sees no gaps. A router indexes GPU events
	// only.
	Medium Medium `json:"-"`
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
