package plane

import (
	"errors"
	"fmt"

	mp "github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/kv"
)

// A frame is encoded and decoded field by field in code rather than by the
// MessagePack library's reflection: the router decodes every frame of
// every worker, and reflection was the largest part of that, as encoding
// was of a worker's frames. The bytes are those reflection writes (with
// UseArrayEncodedStructs, as codec.go's coders): each struct an array of
// its exported fields in declaration order, every sized integer at its
// fixed width and every int at its shortest, nil pointers and slices nil.
// A struct sent as nil or as an empty array decodes to its zero value, as
// reflection decodes it. Tests encode and decode random frames both ways
// and compare. A field added to any of these types needs its line here
// (and a new WireVersion).

// errShort is an array that claims more elements than bytes are left.
var errShort = errors.New("msgpack: array longer than the message")

// fieldsOf reads a struct's array header: ok when the struct's n fields
// follow, false (with no error) for nil or an empty array, whose struct
// is the zero value.
func fieldsOf(d *mp.Decoder, n int) (bool, error) {
	got, err := d.DecodeArrayLen()
	switch {
	case err != nil:
		return false, err
	case got <= 0:
		return false, nil
	case got != n:
		return false, fmt.Errorf("msgpack: array-encoded struct of %d fields, want %d", got, n)
	}
	return true, nil
}

// arrayLen reads a slice's array header (-1 for nil), bounded by the
// bytes left: every element takes one at least.
func arrayLen(d *mp.Decoder) (int, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if r, ok := d.Buffered().(interface{ Len() int }); ok && n > r.Len() {
		return 0, errShort
	}
	return n, nil
}

// encodeArrayLen writes a slice's array header: nil for a nil slice.
func encodeArrayLen(e *mp.Encoder, isNil bool, n int) error {
	if isNil {
		return e.EncodeNil()
	}
	return e.EncodeArrayLen(n)
}

// decodedNil consumes a nil and reports it, or reports false and leaves
// the value to be read.
func decodedNil(d *mp.Decoder) (bool, error) {
	c, err := d.PeekCode()
	if err != nil {
		return false, err
	}
	if c != msgpcode.Nil {
		return false, nil
	}
	return true, d.DecodeNil()
}

func decodeFrame(d *mp.Decoder, x *Frame) error {
	if ok, err := fieldsOf(d, 11); !ok {
		*x = Frame{}
		return err
	}
	var err error
	// Seq
	if x.Seq, err = d.DecodeUint64(); err != nil {
		return err
	}
	// Items
	if n, err := arrayLen(d); err != nil {
		return err
	} else if n >= 0 {
		x.Items = make([]Item, n)
		for i := range x.Items {
			if err := decodeItem(d, &x.Items[i]); err != nil {
				return err
			}
		}
	}
	// Head
	if x.Head, err = d.DecodeUint64(); err != nil {
		return err
	}
	// Acks
	if n, err := arrayLen(d); err != nil {
		return err
	} else if n >= 0 {
		x.Acks = make([]SessionAck, n)
		for i := range x.Acks {
			if err := decodeSessionAck(d, &x.Acks[i]); err != nil {
				return err
			}
		}
	}
	// Lost
	if isNil, err := decodedNil(d); err != nil {
		return err
	} else if !isNil {
		x.Lost = new(LostFrames)
		if err := decodeLostFrames(d, x.Lost); err != nil {
			return err
		}
	}
	// Ended
	if isNil, err := decodedNil(d); err != nil {
		return err
	} else if !isNil {
		x.Ended = new(SessionEnded)
		if err := decodeSessionEnded(d, x.Ended); err != nil {
			return err
		}
	}
	// Turn
	if x.Turn, err = d.DecodeUint64(); err != nil {
		return err
	}
	// Next
	if isNil, err := decodedNil(d); err != nil {
		return err
	} else if !isNil {
		x.Next = new(float64)
		if *x.Next, err = d.DecodeFloat64(); err != nil {
			return err
		}
	}
	// Refused
	if isNil, err := decodedNil(d); err != nil {
		return err
	} else if !isNil {
		x.Refused = new(SessionEnded)
		if err := decodeSessionEnded(d, x.Refused); err != nil {
			return err
		}
	}
	// Leave
	if x.Leave, err = d.DecodeString(); err != nil {
		return err
	}
	// Rejected
	if x.Rejected, err = d.DecodeUint64(); err != nil {
		return err
	}
	return nil
}

func decodeItem(d *mp.Decoder, x *Item) error {
	if ok, err := fieldsOf(d, 5); !ok {
		*x = Item{}
		return err
	}
	// Output
	if isNil, err := decodedNil(d); err != nil {
		return err
	} else if !isNil {
		x.Output = new(WireOutput)
		if err := decodeWireOutput(d, x.Output); err != nil {
			return err
		}
	}
	// Input
	if isNil, err := decodedNil(d); err != nil {
		return err
	} else if !isNil {
		x.Input = new(WireInput)
		if err := decodeWireInput(d, x.Input); err != nil {
			return err
		}
	}
	// Room
	if isNil, err := decodedNil(d); err != nil {
		return err
	} else if !isNil {
		x.Room = new(WireRoom)
		if err := decodeWireRoom(d, x.Room); err != nil {
			return err
		}
	}
	// Arrived
	if isNil, err := decodedNil(d); err != nil {
		return err
	} else if !isNil {
		x.Arrived = new(WireArrived)
		if err := decodeWireArrived(d, x.Arrived); err != nil {
			return err
		}
	}
	// Status
	if isNil, err := decodedNil(d); err != nil {
		return err
	} else if !isNil {
		x.Status = new(WireStatus)
		if err := decodeWireStatus(d, x.Status); err != nil {
			return err
		}
	}
	return nil
}

func decodeSessionAck(d *mp.Decoder, x *SessionAck) error {
	if ok, err := fieldsOf(d, 3); !ok {
		*x = SessionAck{}
		return err
	}
	var err error
	// Session
	if x.Session, err = d.DecodeUint64(); err != nil {
		return err
	}
	// Seq
	if x.Seq, err = d.DecodeUint64(); err != nil {
		return err
	}
	// From
	if x.From, err = d.DecodeUint64(); err != nil {
		return err
	}
	return nil
}

func decodeLostFrames(d *mp.Decoder, x *LostFrames) error {
	if ok, err := fieldsOf(d, 3); !ok {
		*x = LostFrames{}
		return err
	}
	var err error
	// Session
	if x.Session, err = d.DecodeUint64(); err != nil {
		return err
	}
	// From
	if x.From, err = d.DecodeUint64(); err != nil {
		return err
	}
	// Oldest
	if x.Oldest, err = d.DecodeUint64(); err != nil {
		return err
	}
	return nil
}

func decodeSessionEnded(d *mp.Decoder, x *SessionEnded) error {
	if ok, err := fieldsOf(d, 2); !ok {
		*x = SessionEnded{}
		return err
	}
	var err error
	// Session
	if x.Session, err = d.DecodeUint64(); err != nil {
		return err
	}
	// Reason
	if x.Reason, err = d.DecodeString(); err != nil {
		return err
	}
	return nil
}

func decodeWireOutput(d *mp.Decoder, x *WireOutput) error {
	if ok, err := fieldsOf(d, 9); !ok {
		*x = WireOutput{}
		return err
	}
	var err error
	// Start
	if x.Start, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// End
	if x.End, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// Ran
	if x.Ran, err = d.DecodeBool(); err != nil {
		return err
	}
	// FirstTokens
	if n, err := arrayLen(d); err != nil {
		return err
	} else if n >= 0 {
		x.FirstTokens = make([]engine.Token, n)
		for i := range x.FirstTokens {
			if err := decodeEngineToken(d, &x.FirstTokens[i]); err != nil {
				return err
			}
		}
	}
	// Completions
	if n, err := arrayLen(d); err != nil {
		return err
	} else if n >= 0 {
		x.Completions = make([]engine.Completion, n)
		for i := range x.Completions {
			if err := decodeEngineCompletion(d, &x.Completions[i]); err != nil {
				return err
			}
		}
	}
	// Rejections
	if n, err := arrayLen(d); err != nil {
		return err
	} else if n >= 0 {
		x.Rejections = make([]engine.Rejection, n)
		for i := range x.Rejections {
			if err := decodeEngineRejection(d, &x.Rejections[i]); err != nil {
				return err
			}
		}
	}
	// Events
	if n, err := arrayLen(d); err != nil {
		return err
	} else if n >= 0 {
		x.Events = make([]engine.Event, n)
		for i := range x.Events {
			if err := decodeEngineEvent(d, &x.Events[i]); err != nil {
				return err
			}
		}
	}
	// KVEvents
	if n, err := arrayLen(d); err != nil {
		return err
	} else if n >= 0 {
		x.KVEvents = make([]kv.Event, n)
		for i := range x.KVEvents {
			if err := decodeKvEvent(d, &x.KVEvents[i]); err != nil {
				return err
			}
		}
	}
	// Metrics
	if err := decodeEngineMetrics(d, &x.Metrics); err != nil {
		return err
	}
	return nil
}

func decodeWireInput(d *mp.Decoder, x *WireInput) error {
	if ok, err := fieldsOf(d, 5); !ok {
		*x = WireInput{}
		return err
	}
	var err error
	// At
	if x.At, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// Cmd
	if err := x.Cmd.DecodeMsgpack(d); err != nil {
		return err
	}
	// OK
	if x.OK, err = d.DecodeBool(); err != nil {
		return err
	}
	// Err
	if x.Err, err = d.DecodeString(); err != nil {
		return err
	}
	// DelayMs
	if x.DelayMs, err = d.DecodeFloat64(); err != nil {
		return err
	}
	return nil
}

func decodeWireRoom(d *mp.Decoder, x *WireRoom) error {
	if ok, err := fieldsOf(d, 3); !ok {
		*x = WireRoom{}
		return err
	}
	var err error
	// TID
	if x.TID, err = d.DecodeUint64(); err != nil {
		return err
	}
	// Params
	{
		v, err := d.DecodeBytes()
		if err != nil {
			return err
		}
		x.Params = v
	}
	// Err
	if x.Err, err = d.DecodeString(); err != nil {
		return err
	}
	return nil
}

func decodeWireArrived(d *mp.Decoder, x *WireArrived) error {
	if ok, err := fieldsOf(d, 2); !ok {
		*x = WireArrived{}
		return err
	}
	var err error
	// TID
	if x.TID, err = d.DecodeUint64(); err != nil {
		return err
	}
	// ReqID
	if x.ReqID, err = d.DecodeUint64(); err != nil {
		return err
	}
	return nil
}

func decodeWireStatus(d *mp.Decoder, x *WireStatus) error {
	if ok, err := fieldsOf(d, 3); !ok {
		*x = WireStatus{}
		return err
	}
	var err error
	// TID
	if x.TID, err = d.DecodeUint64(); err != nil {
		return err
	}
	// Status
	if x.Status, err = d.DecodeString(); err != nil {
		return err
	}
	// Err
	if x.Err, err = d.DecodeString(); err != nil {
		return err
	}
	return nil
}

func decodeEngineToken(d *mp.Decoder, x *engine.Token) error {
	if ok, err := fieldsOf(d, 4); !ok {
		*x = engine.Token{}
		return err
	}
	var err error
	// RequestID
	if x.RequestID, err = d.DecodeUint64(); err != nil {
		return err
	}
	// Token
	if x.Token, err = d.DecodeUint32(); err != nil {
		return err
	}
	// Index
	if x.Index, err = d.DecodeInt(); err != nil {
		return err
	}
	// At
	if x.At, err = d.DecodeFloat64(); err != nil {
		return err
	}
	return nil
}

func decodeEngineCompletion(d *mp.Decoder, x *engine.Completion) error {
	if ok, err := fieldsOf(d, 11); !ok {
		*x = engine.Completion{}
		return err
	}
	var err error
	// RequestID
	if x.RequestID, err = d.DecodeUint64(); err != nil {
		return err
	}
	// At
	if x.At, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// Arrival
	if x.Arrival, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// QueueMs
	if x.QueueMs, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// FirstTokenAt
	if x.FirstTokenAt, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// PromptTokens
	if x.PromptTokens, err = d.DecodeInt(); err != nil {
		return err
	}
	// OutputTokens
	if x.OutputTokens, err = d.DecodeInt(); err != nil {
		return err
	}
	// CachedTokens
	if x.CachedTokens, err = d.DecodeInt(); err != nil {
		return err
	}
	// Preemptions
	if x.Preemptions, err = d.DecodeInt(); err != nil {
		return err
	}
	// Held
	if x.Held, err = d.DecodeBool(); err != nil {
		return err
	}
	// Truncated
	if x.Truncated, err = d.DecodeBool(); err != nil {
		return err
	}
	return nil
}

func decodeEngineRejection(d *mp.Decoder, x *engine.Rejection) error {
	if ok, err := fieldsOf(d, 4); !ok {
		*x = engine.Rejection{}
		return err
	}
	var err error
	// RequestID
	if x.RequestID, err = d.DecodeUint64(); err != nil {
		return err
	}
	// At
	if x.At, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// Code
	{
		v, err := d.DecodeUint8()
		if err != nil {
			return err
		}
		x.Code = engine.RejectCode(v)
	}
	// Reason
	if x.Reason, err = d.DecodeString(); err != nil {
		return err
	}
	return nil
}

func decodeEngineEvent(d *mp.Decoder, x *engine.Event) error {
	if ok, err := fieldsOf(d, 10); !ok {
		*x = engine.Event{}
		return err
	}
	var err error
	// Kind
	{
		v, err := d.DecodeUint8()
		if err != nil {
			return err
		}
		x.Kind = engine.EventKind(v)
	}
	// At
	if x.At, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// RequestID
	if x.RequestID, err = d.DecodeUint64(); err != nil {
		return err
	}
	// Blocks
	if x.Blocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// Outcome
	{
		v, err := d.DecodeUint8()
		if err != nil {
			return err
		}
		x.Outcome = engine.Outcome(v)
	}
	// Reason
	{
		v, err := d.DecodeUint8()
		if err != nil {
			return err
		}
		x.Reason = engine.EndReason(v)
	}
	// DurationMs
	if x.DurationMs, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// TransferTokens
	if x.TransferTokens, err = d.DecodeInt(); err != nil {
		return err
	}
	// DelayMs
	if x.DelayMs, err = d.DecodeFloat64(); err != nil {
		return err
	}
	// MissingTokens
	if x.MissingTokens, err = d.DecodeInt(); err != nil {
		return err
	}
	return nil
}

func decodeKvEvent(d *mp.Decoder, x *kv.Event) error {
	if ok, err := fieldsOf(d, 8); !ok {
		*x = kv.Event{}
		return err
	}
	var err error
	// ID
	if x.ID, err = d.DecodeUint64(); err != nil {
		return err
	}
	// DPRank
	if x.DPRank, err = d.DecodeUint32(); err != nil {
		return err
	}
	// Kind
	{
		v, err := d.DecodeUint8()
		if err != nil {
			return err
		}
		x.Kind = kv.EventKind(v)
	}
	// Parent
	{
		v, err := d.DecodeUint64()
		if err != nil {
			return err
		}
		x.Parent = kv.SeqHash(v)
	}
	// HasParent
	if x.HasParent, err = d.DecodeBool(); err != nil {
		return err
	}
	// Blocks
	if n, err := arrayLen(d); err != nil {
		return err
	} else if n >= 0 {
		x.Blocks = make([]kv.Block, n)
		for i := range x.Blocks {
			if err := decodeKvBlock(d, &x.Blocks[i]); err != nil {
				return err
			}
		}
	}
	// RemovedHashes
	if n, err := arrayLen(d); err != nil {
		return err
	} else if n >= 0 {
		x.RemovedHashes = make([]kv.SeqHash, n)
		for i := range x.RemovedHashes {
			{
				v, err := d.DecodeUint64()
				if err != nil {
					return err
				}
				x.RemovedHashes[i] = kv.SeqHash(v)
			}
		}
	}
	// Medium
	{
		v, err := d.DecodeUint8()
		if err != nil {
			return err
		}
		x.Medium = kv.Medium(v)
	}
	return nil
}

func decodeEngineMetrics(d *mp.Decoder, x *engine.Metrics) error {
	if ok, err := fieldsOf(d, 25); !ok {
		*x = engine.Metrics{}
		return err
	}
	var err error
	// TotalBlocks
	if x.TotalBlocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// ActiveBlocks
	if x.ActiveBlocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// InactiveBlocks
	if x.InactiveBlocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// FreeBlocks
	if x.FreeBlocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// HeldBlocks
	if x.HeldBlocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// RouterActiveBlocks
	if x.RouterActiveBlocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// Running
	if x.Running, err = d.DecodeInt(); err != nil {
		return err
	}
	// Waiting
	if x.Waiting, err = d.DecodeInt(); err != nil {
		return err
	}
	// HeldRequests
	if x.HeldRequests, err = d.DecodeInt(); err != nil {
		return err
	}
	// TransferringRequests
	if x.TransferringRequests, err = d.DecodeInt(); err != nil {
		return err
	}
	// ReservedRequests
	if x.ReservedRequests, err = d.DecodeInt(); err != nil {
		return err
	}
	// ReservedBlocks
	if x.ReservedBlocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// Preemptions
	if x.Preemptions, err = d.DecodeUint64(); err != nil {
		return err
	}
	// DynamoWaiting
	if x.DynamoWaiting, err = d.DecodeInt(); err != nil {
		return err
	}
	// Passes
	if x.Passes, err = d.DecodeUint64(); err != nil {
		return err
	}
	// G2Blocks
	if x.G2Blocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// G2Capacity
	if x.G2Capacity, err = d.DecodeInt(); err != nil {
		return err
	}
	// G2Offloaded
	if x.G2Offloaded, err = d.DecodeUint64(); err != nil {
		return err
	}
	// G2Onboarded
	if x.G2Onboarded, err = d.DecodeUint64(); err != nil {
		return err
	}
	// G3Blocks
	if x.G3Blocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// G3Capacity
	if x.G3Capacity, err = d.DecodeInt(); err != nil {
		return err
	}
	// G3Offloaded
	if x.G3Offloaded, err = d.DecodeUint64(); err != nil {
		return err
	}
	// G3Onboarded
	if x.G3Onboarded, err = d.DecodeUint64(); err != nil {
		return err
	}
	// G4Blocks
	if x.G4Blocks, err = d.DecodeInt(); err != nil {
		return err
	}
	// G4Onboarded
	if x.G4Onboarded, err = d.DecodeUint64(); err != nil {
		return err
	}
	return nil
}

func decodeKvBlock(d *mp.Decoder, x *kv.Block) error {
	if ok, err := fieldsOf(d, 2); !ok {
		*x = kv.Block{}
		return err
	}
	// Hash
	{
		v, err := d.DecodeUint64()
		if err != nil {
			return err
		}
		x.Hash = kv.SeqHash(v)
	}
	// TokensHash
	{
		v, err := d.DecodeUint64()
		if err != nil {
			return err
		}
		x.TokensHash = kv.LocalHash(v)
	}
	return nil
}

func encodeFrame(e *mp.Encoder, x *Frame) error {
	if err := e.EncodeArrayLen(11); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.Seq); err != nil {
		return err
	}
	if err := encodeArrayLen(e, x.Items == nil, len(x.Items)); err != nil {
		return err
	}
	for i := range x.Items {
		if err := encodeItem(e, &x.Items[i]); err != nil {
			return err
		}
	}
	if err := e.EncodeUint64(x.Head); err != nil {
		return err
	}
	if err := encodeArrayLen(e, x.Acks == nil, len(x.Acks)); err != nil {
		return err
	}
	for i := range x.Acks {
		if err := encodeSessionAck(e, &x.Acks[i]); err != nil {
			return err
		}
	}
	if x.Lost == nil {
		if err := e.EncodeNil(); err != nil {
			return err
		}
	} else if err := encodeLostFrames(e, x.Lost); err != nil {
		return err
	}
	if x.Ended == nil {
		if err := e.EncodeNil(); err != nil {
			return err
		}
	} else if err := encodeSessionEnded(e, x.Ended); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.Turn); err != nil {
		return err
	}
	if x.Next == nil {
		if err := e.EncodeNil(); err != nil {
			return err
		}
	} else if err := e.EncodeFloat64(*x.Next); err != nil {
		return err
	}
	if x.Refused == nil {
		if err := e.EncodeNil(); err != nil {
			return err
		}
	} else if err := encodeSessionEnded(e, x.Refused); err != nil {
		return err
	}
	if err := e.EncodeString(x.Leave); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.Rejected); err != nil {
		return err
	}
	return nil
}

func encodeItem(e *mp.Encoder, x *Item) error {
	if err := e.EncodeArrayLen(5); err != nil {
		return err
	}
	if x.Output == nil {
		if err := e.EncodeNil(); err != nil {
			return err
		}
	} else if err := encodeWireOutput(e, x.Output); err != nil {
		return err
	}
	if x.Input == nil {
		if err := e.EncodeNil(); err != nil {
			return err
		}
	} else if err := encodeWireInput(e, x.Input); err != nil {
		return err
	}
	if x.Room == nil {
		if err := e.EncodeNil(); err != nil {
			return err
		}
	} else if err := encodeWireRoom(e, x.Room); err != nil {
		return err
	}
	if x.Arrived == nil {
		if err := e.EncodeNil(); err != nil {
			return err
		}
	} else if err := encodeWireArrived(e, x.Arrived); err != nil {
		return err
	}
	if x.Status == nil {
		if err := e.EncodeNil(); err != nil {
			return err
		}
	} else if err := encodeWireStatus(e, x.Status); err != nil {
		return err
	}
	return nil
}

func encodeSessionAck(e *mp.Encoder, x *SessionAck) error {
	if err := e.EncodeArrayLen(3); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.Session); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.Seq); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.From); err != nil {
		return err
	}
	return nil
}

func encodeLostFrames(e *mp.Encoder, x *LostFrames) error {
	if err := e.EncodeArrayLen(3); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.Session); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.From); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.Oldest); err != nil {
		return err
	}
	return nil
}

func encodeSessionEnded(e *mp.Encoder, x *SessionEnded) error {
	if err := e.EncodeArrayLen(2); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.Session); err != nil {
		return err
	}
	if err := e.EncodeString(x.Reason); err != nil {
		return err
	}
	return nil
}

func encodeWireOutput(e *mp.Encoder, x *WireOutput) error {
	if err := e.EncodeArrayLen(9); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.Start); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.End); err != nil {
		return err
	}
	if err := e.EncodeBool(x.Ran); err != nil {
		return err
	}
	if err := encodeArrayLen(e, x.FirstTokens == nil, len(x.FirstTokens)); err != nil {
		return err
	}
	for i := range x.FirstTokens {
		if err := encodeEngineToken(e, &x.FirstTokens[i]); err != nil {
			return err
		}
	}
	if err := encodeArrayLen(e, x.Completions == nil, len(x.Completions)); err != nil {
		return err
	}
	for i := range x.Completions {
		if err := encodeEngineCompletion(e, &x.Completions[i]); err != nil {
			return err
		}
	}
	if err := encodeArrayLen(e, x.Rejections == nil, len(x.Rejections)); err != nil {
		return err
	}
	for i := range x.Rejections {
		if err := encodeEngineRejection(e, &x.Rejections[i]); err != nil {
			return err
		}
	}
	if err := encodeArrayLen(e, x.Events == nil, len(x.Events)); err != nil {
		return err
	}
	for i := range x.Events {
		if err := encodeEngineEvent(e, &x.Events[i]); err != nil {
			return err
		}
	}
	if err := encodeArrayLen(e, x.KVEvents == nil, len(x.KVEvents)); err != nil {
		return err
	}
	for i := range x.KVEvents {
		if err := encodeKvEvent(e, &x.KVEvents[i]); err != nil {
			return err
		}
	}
	if err := encodeEngineMetrics(e, &x.Metrics); err != nil {
		return err
	}
	return nil
}

func encodeWireInput(e *mp.Encoder, x *WireInput) error {
	if err := e.EncodeArrayLen(5); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.At); err != nil {
		return err
	}
	if err := x.Cmd.EncodeMsgpack(e); err != nil {
		return err
	}
	if err := e.EncodeBool(x.OK); err != nil {
		return err
	}
	if err := e.EncodeString(x.Err); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.DelayMs); err != nil {
		return err
	}
	return nil
}

func encodeWireRoom(e *mp.Encoder, x *WireRoom) error {
	if err := e.EncodeArrayLen(3); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.TID); err != nil {
		return err
	}
	if err := e.EncodeBytes(x.Params); err != nil {
		return err
	}
	if err := e.EncodeString(x.Err); err != nil {
		return err
	}
	return nil
}

func encodeWireArrived(e *mp.Encoder, x *WireArrived) error {
	if err := e.EncodeArrayLen(2); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.TID); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.ReqID); err != nil {
		return err
	}
	return nil
}

func encodeWireStatus(e *mp.Encoder, x *WireStatus) error {
	if err := e.EncodeArrayLen(3); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.TID); err != nil {
		return err
	}
	if err := e.EncodeString(x.Status); err != nil {
		return err
	}
	if err := e.EncodeString(x.Err); err != nil {
		return err
	}
	return nil
}

func encodeEngineToken(e *mp.Encoder, x *engine.Token) error {
	if err := e.EncodeArrayLen(4); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.RequestID); err != nil {
		return err
	}
	if err := e.EncodeUint32(x.Token); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.Index)); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.At); err != nil {
		return err
	}
	return nil
}

func encodeEngineCompletion(e *mp.Encoder, x *engine.Completion) error {
	if err := e.EncodeArrayLen(11); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.RequestID); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.At); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.Arrival); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.QueueMs); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.FirstTokenAt); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.PromptTokens)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.OutputTokens)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.CachedTokens)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.Preemptions)); err != nil {
		return err
	}
	if err := e.EncodeBool(x.Held); err != nil {
		return err
	}
	if err := e.EncodeBool(x.Truncated); err != nil {
		return err
	}
	return nil
}

func encodeEngineRejection(e *mp.Encoder, x *engine.Rejection) error {
	if err := e.EncodeArrayLen(4); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.RequestID); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.At); err != nil {
		return err
	}
	if err := e.EncodeUint8(uint8(x.Code)); err != nil {
		return err
	}
	if err := e.EncodeString(x.Reason); err != nil {
		return err
	}
	return nil
}

func encodeEngineEvent(e *mp.Encoder, x *engine.Event) error {
	if err := e.EncodeArrayLen(10); err != nil {
		return err
	}
	if err := e.EncodeUint8(uint8(x.Kind)); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.At); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.RequestID); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.Blocks)); err != nil {
		return err
	}
	if err := e.EncodeUint8(uint8(x.Outcome)); err != nil {
		return err
	}
	if err := e.EncodeUint8(uint8(x.Reason)); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.DurationMs); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.TransferTokens)); err != nil {
		return err
	}
	if err := e.EncodeFloat64(x.DelayMs); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.MissingTokens)); err != nil {
		return err
	}
	return nil
}

func encodeKvEvent(e *mp.Encoder, x *kv.Event) error {
	if err := e.EncodeArrayLen(8); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.ID); err != nil {
		return err
	}
	if err := e.EncodeUint32(x.DPRank); err != nil {
		return err
	}
	if err := e.EncodeUint8(uint8(x.Kind)); err != nil {
		return err
	}
	if err := e.EncodeUint64(uint64(x.Parent)); err != nil {
		return err
	}
	if err := e.EncodeBool(x.HasParent); err != nil {
		return err
	}
	if err := encodeArrayLen(e, x.Blocks == nil, len(x.Blocks)); err != nil {
		return err
	}
	for i := range x.Blocks {
		if err := encodeKvBlock(e, &x.Blocks[i]); err != nil {
			return err
		}
	}
	if err := encodeArrayLen(e, x.RemovedHashes == nil, len(x.RemovedHashes)); err != nil {
		return err
	}
	for i := range x.RemovedHashes {
		if err := e.EncodeUint64(uint64(x.RemovedHashes[i])); err != nil {
			return err
		}
	}
	if err := e.EncodeUint8(uint8(x.Medium)); err != nil {
		return err
	}
	return nil
}

func encodeEngineMetrics(e *mp.Encoder, x *engine.Metrics) error {
	if err := e.EncodeArrayLen(25); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.TotalBlocks)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.ActiveBlocks)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.InactiveBlocks)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.FreeBlocks)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.HeldBlocks)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.RouterActiveBlocks)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.Running)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.Waiting)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.HeldRequests)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.TransferringRequests)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.ReservedRequests)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.ReservedBlocks)); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.Preemptions); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.DynamoWaiting)); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.Passes); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.G2Blocks)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.G2Capacity)); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.G2Offloaded); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.G2Onboarded); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.G3Blocks)); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.G3Capacity)); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.G3Offloaded); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.G3Onboarded); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(x.G4Blocks)); err != nil {
		return err
	}
	if err := e.EncodeUint64(x.G4Onboarded); err != nil {
		return err
	}
	return nil
}

func encodeKvBlock(e *mp.Encoder, x *kv.Block) error {
	if err := e.EncodeArrayLen(2); err != nil {
		return err
	}
	if err := e.EncodeUint64(uint64(x.Hash)); err != nil {
		return err
	}
	if err := e.EncodeUint64(uint64(x.TokensHash)); err != nil {
		return err
	}
	return nil
}
