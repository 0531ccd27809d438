package cluster

import (
	"cmp"
	"container/heap"
	"context"
	"log/slog"
	"slices"

	"github.com/kvstrand/mocker/internal/idtab"
	"github.com/kvstrand/mocker/internal/spare"
)

// Forensic event names, one per handoff transition (docs/design.md §3).
const (
	EventHoldStart      = "prefill_kv_pin_start"
	EventDecodeWait     = "decode_kv_wait_start"
	EventDecodeReserved = "decode_kv_reserved"
	EventTransferStart  = "transfer_start"
	EventHoldEnd        = "prefill_kv_pin_end"
)

// Event is one handoff transition as the forensic log records it. Every
// record is also written to the cluster's logger, with the same fields.
type Event struct {
	// Name is one of the Event* constants.
	Name string `json:"event"`
	// AtMs is the modeled time of the transition.
	AtMs          float64 `json:"t_ms"`
	RequestID     uint64  `json:"request_id"`
	TransferID    uint64  `json:"transfer_id,omitempty"`
	PrefillWorker string  `json:"prefill_worker,omitempty"`
	DecodeWorker  string  `json:"decode_worker,omitempty"`
	// PrefillDPRank and DecodeDPRank are the workers' data-parallel ranks
	// (0, and left out, for workers with one rank).
	PrefillDPRank int `json:"prefill_dp_rank,omitempty"`
	DecodeDPRank  int `json:"decode_dp_rank,omitempty"`
	// Blocks is the KV held (pin events).
	Blocks int `json:"blocks,omitempty"`
	// Outcome and DurationMs are set on prefill_kv_pin_end.
	Outcome    string  `json:"outcome,omitempty"`
	DurationMs float64 `json:"duration_ms,omitempty"`
	// MissingTokens and WaitMs are set on decode_kv_reserved.
	MissingTokens int     `json:"missing_tokens,omitempty"`
	WaitMs        float64 `json:"wait_ms,omitempty"`
}

// Hold is one prefill KV hold, an edge of the stranding graph: which
// prefill worker held KV for which decode worker, from when, for how long
// and how it ended.
type Hold struct {
	TransferID    uint64 `json:"transfer_id"`
	RequestID     uint64 `json:"request_id"`
	PrefillWorker string `json:"prefill_worker"`
	DecodeWorker  string `json:"decode_worker"`
	// PrefillDPRank and DecodeDPRank are the data-parallel ranks within
	// those workers: the prefill rank's pool held the KV.
	PrefillDPRank int `json:"prefill_dp_rank"`
	DecodeDPRank  int `json:"decode_dp_rank"`
	Blocks        int `json:"blocks"`
	// StartMs is the modeled time the hold began (the prefill's first
	// token); EndMs when it ended, 0 while it lasts.
	StartMs float64 `json:"start_ms"`
	EndMs   float64 `json:"end_ms"`
	// DurationMs is EndMs − StartMs once ended.
	DurationMs float64 `json:"duration_ms"`
	// Claimed says the decode connected and the transfer started, at
	// TransferStartMs.
	Claimed         bool    `json:"claimed"`
	TransferStartMs float64 `json:"transfer_start_ms,omitempty"`
	// Outcome is "transferred", "aborted", or "" while the hold lasts.
	Outcome string `json:"outcome"`
}

// HoldEdge aggregates every hold between one prefill and one decode worker,
// over all their data-parallel ranks.
type HoldEdge struct {
	PrefillWorker string  `json:"prefill_worker"`
	DecodeWorker  string  `json:"decode_worker"`
	Holds         uint64  `json:"holds"`
	Transferred   uint64  `json:"transferred"`
	Aborted       uint64  `json:"aborted"`
	TotalMs       float64 `json:"total_ms"`
	MaxMs         float64 `json:"max_ms"`
}

// forensics keeps the stranding graph in bounded memory: aggregates per
// edge, the holds still open, the longest ended holds and a ring of the
// most recent ones, plus a ring of recent events. Guarded by Cluster.mu.
type forensics struct {
	log *slog.Logger
	// open are the holds that last, by request id; spare are records of
	// ended ones for the next to use.
	open    idtab.Table[*Hold]
	spare   spare.List[Hold]
	longest holdHeap
	recent  []Hold
	next    int // ring cursor in recent
	events  []Event
	nextEv  int
	edges   map[[2]string]*HoldEdge
	// edgeList holds the same edges: a cluster of a few workers has a
	// few, which a scan finds sooner than hashing two names does.
	edgeList []*HoldEdge
	keepAll  bool    // keep every event in all (RunVirtual)
	all      []Event // every event, when keepAll
}

func newForensics(log *slog.Logger) *forensics {
	return &forensics{log: log, edges: make(map[[2]string]*HoldEdge)}
}

// record keeps ev and writes it to the log.
func (f *forensics) record(ev Event) {
	if f.keepAll {
		f.all = append(f.all, ev)
	}
	if len(f.events) < maxRecentEvents {
		f.events = append(f.events, ev)
	} else {
		f.events[f.nextEv] = ev
		f.nextEv = (f.nextEv + 1) % maxRecentEvents
	}
	if !f.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.Float64("t_ms", ev.AtMs),
		slog.Uint64("request_id", ev.RequestID),
		slog.Uint64("transfer_id", ev.TransferID),
		slog.String("prefill_worker", ev.PrefillWorker),
		slog.String("decode_worker", ev.DecodeWorker),
	}
	if ev.PrefillDPRank != 0 || ev.DecodeDPRank != 0 {
		attrs = append(attrs, slog.Int("prefill_dp_rank", ev.PrefillDPRank), slog.Int("decode_dp_rank", ev.DecodeDPRank))
	}
	switch ev.Name {
	case EventHoldStart:
		attrs = append(attrs, slog.Int("blocks", ev.Blocks))
	case EventHoldEnd:
		attrs = append(attrs, slog.String("outcome", ev.Outcome), slog.Float64("duration_ms", ev.DurationMs), slog.Int("blocks", ev.Blocks))
	case EventDecodeReserved:
		attrs = append(attrs, slog.Int("missing_tokens", ev.MissingTokens), slog.Float64("wait_ms", ev.WaitMs))
	}
	f.log.LogAttrs(context.Background(), slog.LevelInfo, ev.Name, attrs...)
}

func (f *forensics) holdStarted(h Hold) {
	var p *Hold
	if p = f.spare.Take(); p == nil {
		p = new(Hold)
	}
	*p = h
	f.open.Set(h.RequestID, p)
	f.record(Event{Name: EventHoldStart, AtMs: h.StartMs, RequestID: h.RequestID, TransferID: h.TransferID,
		PrefillWorker: h.PrefillWorker, DecodeWorker: h.DecodeWorker,
		PrefillDPRank: h.PrefillDPRank, DecodeDPRank: h.DecodeDPRank, Blocks: h.Blocks})
}

// named names the decode of reqID's open hold, for a hold whose decode
// was named after it started (Decode's claim).
func (f *forensics) named(reqID uint64, decode string, rank int) {
	if h, ok := f.open.Get(reqID); ok {
		h.DecodeWorker, h.DecodeDPRank = decode, rank
	}
}

// transferStarted marks the hold of reqID claimed. It reports false when
// the hold had already ended (its end was delivered first); the kept
// records of it are then completed.
func (f *forensics) transferStarted(reqID uint64, at float64) (Hold, bool) {
	h, open := f.open.Get(reqID)
	if !open {
		h = f.ended(reqID)
		if h == nil {
			f.record(Event{Name: EventTransferStart, AtMs: at, RequestID: reqID})
			return Hold{}, false
		}
	}
	h.Claimed, h.TransferStartMs = true, at
	f.record(Event{Name: EventTransferStart, AtMs: at, RequestID: reqID, TransferID: h.TransferID,
		PrefillWorker: h.PrefillWorker, DecodeWorker: h.DecodeWorker,
		PrefillDPRank: h.PrefillDPRank, DecodeDPRank: h.DecodeDPRank})
	if !open {
		// Both copies, if the hold is in the longest ones too.
		for i := range f.longest {
			if f.longest[i].RequestID == reqID {
				f.longest[i].Claimed, f.longest[i].TransferStartMs = true, at
			}
		}
	}
	return *h, open
}

// ended finds reqID among the most recent ended holds.
func (f *forensics) ended(reqID uint64) *Hold {
	for i := range f.recent {
		if f.recent[i].RequestID == reqID {
			return &f.recent[i]
		}
	}
	return nil
}

// holdEnded closes the open hold of reqID and returns it.
func (f *forensics) holdEnded(reqID uint64, at, duration float64, outcome string, transferred bool) (Hold, bool) {
	p, ok := f.open.Get(reqID)
	if !ok {
		return Hold{}, false
	}
	f.open.Delete(reqID)
	h := *p
	f.spare.Put(p)
	if transferred {
		h.Claimed = true
	}
	h.EndMs, h.DurationMs, h.Outcome = at, duration, outcome
	f.record(Event{Name: EventHoldEnd, AtMs: at, RequestID: reqID, TransferID: h.TransferID,
		PrefillWorker: h.PrefillWorker, DecodeWorker: h.DecodeWorker,
		PrefillDPRank: h.PrefillDPRank, DecodeDPRank: h.DecodeDPRank, Blocks: h.Blocks, Outcome: outcome, DurationMs: duration})

	e := f.edge(h.PrefillWorker, h.DecodeWorker)
	e.Holds++
	if outcome == OutcomeAborted {
		e.Aborted++
	} else {
		e.Transferred++
	}
	e.TotalMs += duration
	e.MaxMs = max(e.MaxMs, duration)

	if len(f.recent) < maxRecentHolds {
		f.recent = append(f.recent, h)
	} else {
		f.recent[f.next] = h
		f.next = (f.next + 1) % maxRecentHolds
	}
	switch {
	case len(f.longest) < maxForensicHolds:
		heap.Push(&f.longest, h)
	case duration > f.longest[0].DurationMs:
		f.longest[0] = h
		heap.Fix(&f.longest, 0)
	}
	return h, true
}

// holds returns the open holds, the longest and the most recent ended ones,
// each once, sorted by start.
func (f *forensics) holds() []Hold {
	seen := make(map[uint64]bool)
	var out []Hold
	add := func(h Hold) {
		if !seen[h.RequestID] {
			seen[h.RequestID] = true
			out = append(out, h)
		}
	}
	for _, h := range f.open.All() {
		add(*h)
	}
	for _, h := range f.longest {
		add(h)
	}
	for _, h := range f.recent {
		add(h)
	}
	slices.SortFunc(out, func(a, b Hold) int {
		if c := cmp.Compare(a.StartMs, b.StartMs); c != 0 {
			return c
		}
		return cmp.Compare(a.RequestID, b.RequestID)
	})
	return out
}

func (f *forensics) recentEvents() []Event {
	out := make([]Event, 0, len(f.events))
	out = append(out, f.events[f.nextEv:]...)
	return append(out, f.events[:f.nextEv]...)
}

// scanEdges is how many edges edge scans before it asks the map.
const scanEdges = 16

// edge is the edge from prefill worker p to decode worker d, made on its
// first hold.
func (f *forensics) edge(p, d string) *HoldEdge {
	if len(f.edgeList) <= scanEdges {
		for _, e := range f.edgeList {
			if e.PrefillWorker == p && e.DecodeWorker == d {
				return e
			}
		}
		if len(f.edgeList) < scanEdges {
			return f.addEdge(p, d)
		}
	}
	if e := f.edges[[2]string{p, d}]; e != nil {
		return e
	}
	return f.addEdge(p, d)
}

func (f *forensics) addEdge(p, d string) *HoldEdge {
	e := &HoldEdge{PrefillWorker: p, DecodeWorker: d}
	f.edges[[2]string{p, d}] = e
	f.edgeList = append(f.edgeList, e)
	return e
}

func (f *forensics) graph() []HoldEdge {
	out := make([]HoldEdge, 0, len(f.edges))
	for _, e := range f.edges {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b HoldEdge) int {
		if c := cmp.Compare(a.PrefillWorker, b.PrefillWorker); c != 0 {
			return c
		}
		return cmp.Compare(a.DecodeWorker, b.DecodeWorker)
	})
	return out
}

// holdHeap is a min-heap by duration: its root is the shortest of the
// longest holds, the one a longer hold replaces.
type holdHeap []Hold

func (h holdHeap) Len() int           { return len(h) }
func (h holdHeap) Less(i, j int) bool { return h[i].DurationMs < h[j].DurationMs }
func (h holdHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *holdHeap) Push(x any)        { *h = append(*h, x.(Hold)) }
func (h *holdHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// LongestFirst orders hs by duration, longest first (ties by transfer id),
// in place, and returns the first n of them: how every summary lists holds.
func LongestFirst(hs []Hold, n int) []Hold {
	slices.SortStableFunc(hs, func(a, b Hold) int {
		if a.DurationMs != b.DurationMs {
			return cmp.Compare(b.DurationMs, a.DurationMs)
		}
		return cmp.Compare(a.TransferID, b.TransferID)
	})
	return hs[:min(n, len(hs))]
}
