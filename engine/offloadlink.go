package engine

import (
	"fmt"

	"github.com/kvstrand/mocker/kv"
)

// DefaultOffloadBatchSize is KVBM's offload batch when offload_batch_size is
// unset or 0, as in Dynamo's mocker.
const DefaultOffloadBatchSize = 32

// DefaultBandwidthG1ToG2, DefaultBandwidthG2ToG3 and DefaultBandwidthG2ToG4
// are the GPU-to-host, host-to-disk and host-to-object-storage bandwidths
// in GB/s that time the copies down when bandwidth_g1_to_g2_gbps,
// bandwidth_g2_to_g3_gbps or bandwidth_g2_to_g4_gbps is unset, as in
// Dynamo's mocker.
const (
	DefaultBandwidthG1ToG2 = 14.0
	DefaultBandwidthG2ToG3 = 7.0
	DefaultBandwidthG2ToG4 = 4.0
)

// offloadLink is a timed copy of blocks down one tier, one of KVBM's
// offload pipelines as Dynamo's mocker drives them (G1 to G2, G2 to G3, G2
// to G4): the blocks handed over at once are cut into batches of at most
// batch blocks, each batch is one transfer, at most slots transfers are
// under way at once (the rest wait in order), and the transfers under way
// share the link's bandwidth equally (processor sharing). A block is in
// the tier below only when its batch has landed; until then it is in
// flight.
//
// The link is advanced lazily, to the time a pass starts or blocks are
// sent: processor sharing gives the same completion times however often it
// is advanced. Batches that complete wait in ready, in completion order,
// with the time each landed, for the pool to file them at its next pass.
type offloadLink struct {
	// perBlock is one block's copy in ms at the link's full bandwidth.
	perBlock float64
	batch    int
	slots    int
	// at is the time active's left figures hold at.
	at     float64
	active []offloadBatch
	queued []offloadBatch
	// queuedHead is queued's first waiting batch.
	queuedHead int
	// inflight holds the hashes copied and not yet filed: an eviction of
	// a block already on its way sends it no second time (KVBM's pending
	// tracker).
	inflight map[kv.SeqHash]struct{}
	ready    []landedBatch
	scratch  []kv.SeqHash
}

// landedBatch is a batch that landed at at.
type landedBatch struct {
	at     float64
	hashes []kv.SeqHash
}

// offloadBatch is one transfer: its blocks and the ms of copying it has
// left at the link's full bandwidth.
type offloadBatch struct {
	hashes []kv.SeqHash
	left   float64
}

func newOffloadLink(perBlock float64, batch, slots int) *offloadLink {
	return &offloadLink{perBlock: perBlock, batch: batch, slots: slots, inflight: make(map[kv.SeqHash]struct{})}
}

// send starts copying hs at now, in batches.
func (l *offloadLink) send(now float64, hs []kv.SeqHash) {
	l.advance(now)
	for len(hs) > 0 {
		n := min(len(hs), l.batch)
		b := offloadBatch{hashes: make([]kv.SeqHash, n), left: float64(n) * l.perBlock}
		copy(b.hashes, hs[:n])
		for _, h := range b.hashes {
			l.inflight[h] = struct{}{}
		}
		l.queued = append(l.queued, b)
		hs = hs[n:]
	}
	l.start()
}

// start moves waiting batches under way while there is room.
func (l *offloadLink) start() {
	for len(l.active) < l.slots && l.queuedHead < len(l.queued) {
		l.active = append(l.active, l.queued[l.queuedHead])
		l.queued[l.queuedHead] = offloadBatch{}
		l.queuedHead++
	}
	if l.queuedHead == len(l.queued) {
		l.queued, l.queuedHead = l.queued[:0], 0
	}
}

// advance runs the link to now: the batches that complete by then move to
// ready, in the order they complete (batches completing together in the
// order they started).
func (l *offloadLink) advance(now float64) {
	for len(l.active) > 0 {
		n := float64(len(l.active))
		least := l.least()
		end := l.at + least*n
		if end > now {
			if now > l.at {
				d := (now - l.at) / n
				for i := range l.active {
					l.active[i].left -= d
				}
				l.at = now
			}
			return
		}
		l.at = end
		keep := l.active[:0]
		for _, b := range l.active {
			if b.left -= least; b.left <= 1e-12 {
				l.ready = append(l.ready, landedBatch{at: end, hashes: b.hashes})
				continue
			}
			keep = append(keep, b)
		}
		clear(l.active[len(keep):])
		l.active = keep
		l.start()
	}
	l.at = max(l.at, now)
}

// sendNew sends, at now, the blocks of hs neither in flight on l nor held
// below (held), in order, and returns them (scratch, valid until the next
// call).
func (l *offloadLink) sendNew(now float64, hs []kv.SeqHash, held func(kv.SeqHash) bool) []kv.SeqHash {
	send := l.scratch[:0]
	for _, h := range hs {
		if _, ok := l.inflight[h]; !ok && !held(h) {
			send = append(send, h)
		}
	}
	l.scratch = send
	l.send(now, send)
	return send
}

// nextLanding is when the first batch under way lands, if no more is sent;
// ok is false when none is under way.
func (l *offloadLink) nextLanding() (at float64, ok bool) {
	if len(l.active) == 0 {
		return 0, false
	}
	return l.at + l.least()*float64(len(l.active)), true
}

// least is the least copying left, at full bandwidth, of the batches
// under way, of which there must be one.
func (l *offloadLink) least() float64 {
	least := l.active[0].left
	for _, b := range l.active[1:] {
		least = min(least, b.left)
	}
	return least
}

// take hands each landed batch, in order, to file, and forgets its blocks
// as in flight.
func (l *offloadLink) take(file func(at float64, hs []kv.SeqHash)) {
	for i, b := range l.ready {
		for _, h := range b.hashes {
			delete(l.inflight, h)
		}
		file(b.at, b.hashes)
		l.ready[i] = landedBatch{}
	}
	l.ready = l.ready[:0]
}

// audit checks that the blocks in flight are those of the batches under
// way, waiting or landed, once each, and that no batch waits while there
// is room.
func (l *offloadLink) audit() error {
	n := 0
	for _, b := range l.ready {
		n += len(b.hashes)
	}
	for _, b := range l.active {
		n += len(b.hashes)
	}
	for _, b := range l.queued[l.queuedHead:] {
		n += len(b.hashes)
	}
	if n != len(l.inflight) {
		return fmt.Errorf("offload link: %d blocks in its batches, %d in flight", n, len(l.inflight))
	}
	if len(l.active) > l.slots || (len(l.active) < l.slots && l.queuedHead < len(l.queued)) {
		return fmt.Errorf("offload link: %d batches under way (at most %d), %d waiting", len(l.active), l.slots, len(l.queued)-l.queuedHead)
	}
	return nil
}
