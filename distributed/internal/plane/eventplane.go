package plane

import (
	"fmt"
	"time"

	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/kv"
)

// Dynamo's event plane (lib/runtime/src/transports/event_plane), published by
// every worker so Dynamo's tools (`nats sub 'namespace.>'`, a Dynamo KV
// router) see what they expect:
//
//	namespace.{ns}.component.{component}.kv-events                   RouterEvent
//	namespace.{ns}.component.{component}.endpoint.generate.kv_metrics ActiveLoad
//
// each in the msgpack envelope {topic, publisher_id, sequence,
// published_at, payload}, payload itself msgpack. mocker's own router does
// not read these: it takes the same KV events and load from the worker's
// frames, where they are ordered with the request steps they belong to.
// The publisher is registered under Dynamo's event-channel key.
const (
	TopicKVEvents = "kv-events"
	TopicMetrics  = "kv_metrics"
)

func KvEventsSubject(ns string, role engine.WorkerType) string {
	return fmt.Sprintf("namespace.%s.component.%s.%s", ns, ComponentOf(role), TopicKVEvents)
}

func MetricsSubject(ns string, role engine.WorkerType) string {
	return fmt.Sprintf("namespace.%s.component.%s.endpoint.%s.%s", ns, ComponentOf(role), endpointName, TopicMetrics)
}

func EventChannelKey(ns string, role engine.WorkerType, publisher uint64) string {
	return fmt.Sprintf("v1/event_channels/namespace/%s/component/%s/topic/%s/%x", ns, ComponentOf(role), TopicKVEvents, publisher)
}

// EventPublisher numbers one worker's envelopes.
type EventPublisher struct {
	ID       uint64
	seq      uint64
	LastLoad int // the kv_used_blocks last published; -1: none yet
}

// Envelope wraps payload for topic.
func (p *EventPublisher) Envelope(topic string, payload []byte, now time.Time) []byte {
	var e msgpack
	e.mapN(5)
	e.str("topic")
	e.str(topic)
	e.str("publisher_id")
	e.uint(p.ID)
	e.str("sequence")
	e.uint(p.seq)
	e.str("published_at")
	e.uint(uint64(now.UnixMilli()))
	e.str("payload")
	e.bin(payload)
	p.seq++
	return e.b
}

// RouterEvent is Dynamo's RouterEvent for ev of worker id.
func RouterEvent(worker uint64, ev kv.Event) []byte {
	var e msgpack
	e.mapN(3)
	e.str("worker_id")
	e.uint(worker)
	e.str("storage_tier")
	e.str("device")
	e.str("event")
	e.mapN(3)
	e.str("event_id")
	e.uint(ev.ID)
	e.str("dp_rank")
	e.uint(uint64(ev.DPRank))
	e.str("data")
	switch ev.Kind {
	case kv.Stored:
		e.mapN(1)
		e.str("stored")
		e.mapN(2)
		e.str("parent_hash")
		if ev.HasParent {
			e.uint(uint64(ev.Parent))
		} else {
			e.nil()
		}
		e.str("blocks")
		e.array(len(ev.Blocks))
		for _, b := range ev.Blocks {
			e.mapN(2)
			e.str("block_hash")
			e.uint(uint64(b.Hash))
			e.str("tokens_hash")
			e.uint(uint64(b.TokensHash))
		}
	case kv.Removed:
		e.mapN(1)
		e.str("removed")
		e.mapN(1)
		e.str("block_hashes")
		e.array(len(ev.RemovedHashes))
		for _, h := range ev.RemovedHashes {
			e.uint(uint64(h))
		}
	default:
		e.str("cleared")
	}
	return e.b
}

// ActiveLoad is Dynamo's ActiveLoad: the router-facing used blocks, as
// Dynamo's mocker reports them.
func ActiveLoad(worker uint64, m engine.Metrics) []byte {
	var e msgpack
	e.mapN(4)
	e.str("worker_id")
	e.uint(worker)
	e.str("dp_rank")
	e.uint(0)
	e.str("active_decode_blocks")
	e.uint(uint64(m.RouterActiveBlocks))
	e.str("kv_used_blocks")
	e.uint(uint64(m.RouterActiveBlocks))
	return e.b
}
