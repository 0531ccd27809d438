package kv

import (
	"encoding/json"
	"fmt"
)

// The wire shape follows Dynamo's RouterEvent JSON, so a consumer written for
// Dynamo's router can read mocker's events:
//
//	{"worker_id":1,"event":{"event_id":7,"dp_rank":0,
//	  "data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}
//
// data is {"removed":{"block_hashes":[...]}} or the string "cleared" for the
// other kinds. An event of a lower tier adds its medium: "medium":"CPU" for
// the host tier, "DISK" for the disk tier, "EXTERNAL" for object storage; a
// GPU event names no medium.

type storedJSON struct {
	ParentHash *SeqHash `json:"parent_hash"`
	Blocks     []Block  `json:"blocks"`
}

type removedJSON struct {
	BlockHashes []SeqHash `json:"block_hashes"`
}

type dataJSON struct {
	Stored  *storedJSON  `json:"stored,omitempty"`
	Removed *removedJSON `json:"removed,omitempty"`
}

type eventJSON struct {
	ID     uint64          `json:"event_id"`
	DPRank uint32          `json:"dp_rank"`
	Data   json.RawMessage `json:"data"`
	// Medium is written only for a tier below the GPU pool, so a GPU
	// event keeps Dynamo's shape byte for byte.
	Medium string `json:"medium,omitempty"`
}

// MarshalJSON writes the event in Dynamo's KvCacheEvent shape.
func (e Event) MarshalJSON() ([]byte, error) {
	var data []byte
	var err error
	switch e.Kind {
	case Stored:
		s := storedJSON{Blocks: e.Blocks}
		if s.Blocks == nil {
			s.Blocks = []Block{}
		}
		if e.HasParent {
			p := e.Parent
			s.ParentHash = &p
		}
		data, err = json.Marshal(dataJSON{Stored: &s})
	case Removed:
		r := removedJSON{BlockHashes: e.RemovedHashes}
		if r.BlockHashes == nil {
			r.BlockHashes = []SeqHash{}
		}
		data, err = json.Marshal(dataJSON{Removed: &r})
	case Cleared:
		data = []byte(`"cleared"`)
	default:
		return nil, fmt.Errorf("kv event %d: unknown kind %d", e.ID, e.Kind)
	}
	if err != nil {
		return nil, err
	}
	raw := eventJSON{ID: e.ID, DPRank: e.DPRank, Data: data}
	switch e.Medium {
	case MediumGPU:
	case MediumCPU, MediumDisk, MediumExternal:
		raw.Medium = e.Medium.String()
	default:
		return nil, fmt.Errorf("kv event %d: unknown medium %d", e.ID, e.Medium)
	}
	return json.Marshal(raw)
}

// UnmarshalJSON reads the shape MarshalJSON writes.
func (e *Event) UnmarshalJSON(b []byte) error {
	var raw eventJSON
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("kv event: %w", err)
	}
	*e = Event{ID: raw.ID, DPRank: raw.DPRank}
	m, ok := ParseMedium(raw.Medium)
	if !ok {
		return fmt.Errorf("kv event %d: unknown medium %q (want \"GPU\", \"CPU\", \"DISK\" or \"EXTERNAL\")", raw.ID, raw.Medium)
	}
	e.Medium = m
	var s string
	if err := json.Unmarshal(raw.Data, &s); err == nil {
		if s != "cleared" {
			return fmt.Errorf("kv event %d: unknown data %q (want \"cleared\", {\"stored\":…} or {\"removed\":…})", raw.ID, s)
		}
		e.Kind = Cleared
		return nil
	}
	var d dataJSON
	if err := json.Unmarshal(raw.Data, &d); err != nil {
		return fmt.Errorf("kv event %d: data: %w", raw.ID, err)
	}
	switch {
	case d.Stored != nil && d.Removed == nil:
		e.Kind = Stored
		e.Blocks = d.Stored.Blocks
		if d.Stored.ParentHash != nil {
			e.HasParent, e.Parent = true, *d.Stored.ParentHash
		}
	case d.Removed != nil && d.Stored == nil:
		e.Kind = Removed
		e.RemovedHashes = d.Removed.BlockHashes
	default:
		return fmt.Errorf("kv event %d: data must hold exactly one of stored or removed", raw.ID)
	}
	return nil
}

// workerEventJSON is WorkerEvent's wire shape.
type workerEventJSON struct {
	WorkerID uint64 `json:"worker_id"`
	Event    Event  `json:"event"`
}

// MarshalJSON writes Dynamo's RouterEvent shape.
func (w WorkerEvent) MarshalJSON() ([]byte, error) {
	return json.Marshal(workerEventJSON(w))
}

// UnmarshalJSON reads Dynamo's RouterEvent shape.
func (w *WorkerEvent) UnmarshalJSON(b []byte) error {
	var raw workerEventJSON
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*w = WorkerEvent(raw)
	return nil
}
