package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvstrand/mocker/engine"
)

// Stats is the cluster's state now and its counters since New.
type Stats struct {
	// Requests counts Generate calls; each ends as exactly one of
	// Completed, Aborted, Rejected or Errored, or is InFlight.
	Requests  uint64 `json:"requests"`
	Completed uint64 `json:"completed"`
	Aborted   uint64 `json:"aborted"`
	Rejected  uint64 `json:"rejected"`
	Errored   uint64 `json:"errored"`
	InFlight  int    `json:"in_flight"`
	// PrefillRejections counts requests refused because every prefill
	// worker was busy (the cascade); they are among Rejected.
	PrefillRejections uint64 `json:"prefill_rejections"`
	// Holds counts prefill KV holds started; HoldsReleased those that ended
	// by a transfer, HoldsAborted those ended by their abort or session
	// deadline, HoldsCancelled those given up because the request was
	// refused, withdrawn or cut short. Holds − HoldsReleased − HoldsAborted −
	// HoldsCancelled holds last now. (Their JSON keys, pins and pins_*,
	// are the names scripts and thresholds already use: in mocker's
	// metrics and JSON "pin" and "hold" name the same thing.)
	Holds         uint64 `json:"pins"`
	HoldsReleased uint64 `json:"pins_released"`
	HoldsAborted  uint64 `json:"pins_aborted"`
	// HoldsCancelled: see Holds.
	HoldsCancelled uint64 `json:"pins_cancelled"`
	// HoldMsTotal and HoldMsMax sum and bound the modeled duration of ended
	// holds.
	HoldMsTotal float64 `json:"pin_ms_total"`
	HoldMsMax   float64 `json:"pin_ms_max"`
	// TransfersStarted counts decodes that claimed a hold; each ends as
	// TransfersCompleted or TransfersAborted.
	TransfersStarted   uint64 `json:"transfers_started"`
	TransfersCompleted uint64 `json:"transfers_completed"`
	TransfersAborted   uint64 `json:"transfers_aborted"`
	// HeldBlocks, ReservedBlocks and ActiveBlocks sum the workers' now;
	// PeakHeldBlocks is the largest HeldBlocks seen.
	HeldBlocks     int `json:"held_blocks"`
	ReservedBlocks int `json:"reserved_blocks"`
	ActiveBlocks   int `json:"active_blocks"`
	PeakHeldBlocks int `json:"peak_held_blocks"`
	// TierStats sums the workers' KV tiers below their GPU pools.
	TierStats
	// NowMs is the cluster's modeled time.
	NowMs   float64       `json:"now_ms"`
	Workers []WorkerStats `json:"workers"`
}

// TierStats are the KV tiers below a GPU pool, one rank's or summed over
// a cluster's: the host (G2) offload tier (num_g2_blocks), the disk (G3)
// tier (num_g3_blocks) and object storage (G4, enable_g4_storage). Stats,
// WorkerStats and the script's summary data embed it, so a tier figure
// added here reaches their JSON and the script under one name.
type TierStats struct {
	// G2Blocks and G2Capacity are the host tier's blocks occupied and in
	// all; G2Onboarded counts the blocks prefix hits found there and
	// copied back instead of recomputing them. All 0 without a tier.
	G2Blocks    int    `json:"g2_blocks,omitempty"`
	G2Capacity  int    `json:"g2_capacity,omitempty"`
	G2Onboarded uint64 `json:"g2_onboarded,omitempty"`
	// G3Blocks, G3Capacity and G3Onboarded are the same for the disk
	// tier, G4Blocks and G4Onboarded for object storage (which has no
	// bound): the blocks prefix hits found there, past the tiers above,
	// staged back through the host tier. G2Onboarded counts only the hits
	// found in the host tier itself. 0 without the tier.
	G3Blocks    int    `json:"g3_blocks,omitempty"`
	G3Capacity  int    `json:"g3_capacity,omitempty"`
	G3Onboarded uint64 `json:"g3_onboarded,omitempty"`
	G4Blocks    int    `json:"g4_blocks,omitempty"`
	G4Onboarded uint64 `json:"g4_onboarded,omitempty"`
}

// tierStats reads a rank's tiers from its metrics.
func tierStats(m engine.Metrics) TierStats {
	return TierStats{
		G2Blocks: m.G2Blocks, G2Capacity: m.G2Capacity, G2Onboarded: m.G2Onboarded,
		G3Blocks: m.G3Blocks, G3Capacity: m.G3Capacity, G3Onboarded: m.G3Onboarded,
		G4Blocks: m.G4Blocks, G4Onboarded: m.G4Onboarded,
	}
}

// add sums o into t.
func (t *TierStats) add(o TierStats) {
	t.G2Blocks += o.G2Blocks
	t.G2Capacity += o.G2Capacity
	t.G2Onboarded += o.G2Onboarded
	t.G3Blocks += o.G3Blocks
	t.G3Capacity += o.G3Capacity
	t.G3Onboarded += o.G3Onboarded
	t.G4Blocks += o.G4Blocks
	t.G4Onboarded += o.G4Onboarded
}

// WorkerStats is one worker's occupancy, in blocks and requests.
// A worker with dp_size n has n entries, one per data-parallel rank, each
// its own scheduler and pool, all with the worker's Name.
type WorkerStats struct {
	Name           string `json:"name"`
	DPRank         int    `json:"dp_rank"`
	Role           string `json:"role"`
	TotalBlocks    int    `json:"total_blocks"`
	ActiveBlocks   int    `json:"active_blocks"`
	InactiveBlocks int    `json:"inactive_blocks"`
	FreeBlocks     int    `json:"free_blocks"`
	HeldBlocks     int    `json:"held_blocks"`
	ReservedBlocks int    `json:"reserved_blocks"`
	Running        int    `json:"running"`
	Waiting        int    `json:"waiting"`
	HeldRequests   int    `json:"held_requests"`
	Passes         uint64 `json:"passes"`
	// TierStats are the rank's KV tiers below its GPU pool.
	TierStats
	// G2Offloaded counts the blocks the rank's GPU pool evicted into its
	// host tier, G3Offloaded those the host tier copied on to disk. 0
	// without the tier.
	G2Offloaded uint64 `json:"g2_offloaded,omitempty"`
	G3Offloaded uint64 `json:"g3_offloaded,omitempty"`
	// Preemptions counts the requests the rank's scheduler preempted
	// (SGLang: retracted) since start, for serve's metrics; kept out of
	// the JSON, whose keys scripts and recorded runs already read.
	Preemptions uint64 `json:"-"`
	// TransferAddr is a prefill worker's transfer server ("host:port"),
	// shared by its ranks.
	TransferAddr string `json:"transfer_addr,omitempty"`
}

// Stats reports the cluster's state now and its counters since New.
func (c *Cluster) Stats() Stats {
	var s Stats
	c.query(func() { s = c.statsNow() })
	return s
}

// statsNow builds Stats on the loop.
func (c *Cluster) statsNow() Stats {
	k := c.stats
	s := Stats{
		Requests: k.requests, Completed: k.completed, Aborted: k.aborted, Rejected: k.rejected, Errored: k.errored,
		InFlight: c.active, PrefillRejections: k.prefillRejections,
		Holds: k.pins, HoldsReleased: k.holdsReleased, HoldsAborted: k.holdsAborted, HoldsCancelled: k.holdsCancelled,
		HoldMsTotal: k.holdMsTotal, HoldMsMax: k.holdMsMax,
		TransfersStarted: k.transfersStarted, TransfersCompleted: k.transfersDone, TransfersAborted: k.transfersLost,
		PeakHeldBlocks: k.peakHeld,
		Workers:        make([]WorkerStats, len(c.workers)),
	}
	if !c.ended {
		s.NowMs = c.stamp()
	}
	for i, w := range c.workers {
		m := w.handle.Metrics()
		if c.ended {
			m = w.last // what the workers last reported, frozen at Close
		}
		s.Workers[i] = WorkerStats{
			Name: w.name, DPRank: w.rank, Role: string(w.role),
			TotalBlocks: m.TotalBlocks, ActiveBlocks: m.ActiveBlocks, InactiveBlocks: m.InactiveBlocks,
			FreeBlocks: m.FreeBlocks, HeldBlocks: m.HeldBlocks, ReservedBlocks: m.ReservedBlocks,
			Running: m.Running, Waiting: m.Waiting, HeldRequests: m.HeldRequests, Passes: m.Passes,
			TierStats: tierStats(m), G2Offloaded: m.G2Offloaded, G3Offloaded: m.G3Offloaded,
			Preemptions: m.Preemptions,
		}
		if w.server != nil {
			s.Workers[i].TransferAddr = w.server.AdvertisedAddr()
		} else {
			s.Workers[i].TransferAddr = w.transferAddr
		}
		s.HeldBlocks += m.HeldBlocks
		s.ReservedBlocks += m.ReservedBlocks
		s.ActiveBlocks += m.ActiveBlocks
		s.add(s.Workers[i].TierStats)
	}
	return s
}

// Holds reports the longest holds (longest first) and then the most recent
// ones, open holds included.
func (c *Cluster) Holds() []Hold {
	var hs []Hold
	c.query(func() { hs = c.forensic.holds() })
	return hs
}

// HoldGraph sums the ended holds per (prefill, decode) pair: which prefill
// held KV for which decode, how often, how long, how it ended.
func (c *Cluster) HoldGraph() []HoldEdge {
	var g []HoldEdge
	c.query(func() { g = c.forensic.graph() })
	return g
}

// Events returns the most recent forensic events, oldest first.
func (c *Cluster) Events() []Event {
	var ev []Event
	c.query(func() { ev = c.forensic.recentEvents() })
	return ev
}

// Sleep waits for ms of the cluster's modeled time, on the loop's clock: a
// script's think time that neither the speedup nor a lagging host changes
// in modeled terms. It returns early when ctx ends or the cluster closes.
func (c *Cluster) Sleep(ctx context.Context, ms float64) error {
	if c.stepped != nil {
		return c.sleepStepped(ctx, ms)
	}
	done := make(chan struct{})
	if !c.send(sleepMsg{ms: ms, done: done}) {
		return errors.New("sleep: " + errClosed)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return errors.New("sleep: " + errClosed)
	}
}

// Drain waits until no request is in flight and every worker is idle
// (nothing held, reserved, running, waiting or active), and returns the
// Stats then. It fails when ctx ends first, saying what is still busy, or
// when the cluster closes.
func (c *Cluster) Drain(ctx context.Context) (Stats, error) {
	if c.stepped != nil {
		return c.drainStepped(ctx)
	}
	done := make(chan struct{})
	if !c.send(drainMsg{done: done}) {
		return c.Stats(), errors.New("drain: " + errClosed)
	}
	select {
	case <-done:
		return c.Stats(), nil
	case <-c.done:
		return c.Stats(), errors.New("drain: " + errClosed)
	case <-ctx.Done():
		s := c.Stats()
		return s, fmt.Errorf("drain: %s: %w", busyReason(s), ctx.Err())
	}
}

// checkDrained wakes the Drain calls waiting for an idle cluster.
func (c *Cluster) checkDrained() {
	if len(c.drainers) == 0 || c.active > 0 {
		return
	}
	for _, w := range c.workers {
		if m := w.handle.Metrics(); m.HeldRequests > 0 || m.ReservedBlocks > 0 || m.Running > 0 || m.Waiting > 0 || m.ActiveBlocks > 0 {
			return
		}
	}
	for _, d := range c.drainers {
		d()
	}
	c.drainers = nil
}

// busyReason says what keeps the cluster from being drained.
func busyReason(s Stats) string {
	if s.InFlight > 0 {
		return fmt.Sprintf("%d requests in flight", s.InFlight)
	}
	labels := workerLabels(s.Workers)
	for i, w := range s.Workers {
		if w.HeldRequests > 0 || w.ReservedBlocks > 0 || w.Running > 0 || w.Waiting > 0 || w.ActiveBlocks > 0 {
			return fmt.Sprintf("%s busy (held %d requests, reserved %d blocks, running %d, waiting %d, active %d blocks)",
				labels[i], w.HeldRequests, w.ReservedBlocks, w.Running, w.Waiting, w.ActiveBlocks)
		}
	}
	return "nothing"
}

// workerLabels names each entry of ws in messages: the worker's name, with
// its rank when the worker has several.
func workerLabels(ws []WorkerStats) []string {
	ranked := make(map[string]bool)
	for _, w := range ws {
		if w.DPRank > 0 {
			ranked[w.Name] = true
		}
	}
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Name
		if ranked[w.Name] {
			out[i] = fmt.Sprintf("%s dp_rank %d", w.Name, w.DPRank)
		}
	}
	return out
}

// invariantState is what CheckInvariants judges, taken on the loop.
type invariantState struct {
	s         Stats
	open      int
	causality uint64
	example   string
	settled   bool // nothing in flight: the after-drain invariants apply
}

// CheckInvariants checks docs/design.md §6 on the cluster now: block conservation
// per worker (per data-parallel rank, each its own pool), request and pin conservation, modeled time never going back
// for a request, and, when nothing is in flight, that no worker holds,
// reserves or runs anything and every transfer ended. It returns every
// violation found.
func (c *Cluster) CheckInvariants() error {
	var st invariantState
	c.query(func() {
		st = invariantState{s: c.statsNow(), open: c.forensic.open.Len(), causality: c.stats.causality,
			example: c.stats.causalityExample}
		st.settled = c.active == 0
	})
	return st.check()
}

func (st invariantState) check() error {
	s := st.s
	var errs []error
	labels := workerLabels(s.Workers)
	for i, w := range s.Workers {
		if w.ActiveBlocks+w.InactiveBlocks+w.FreeBlocks != w.TotalBlocks {
			errs = append(errs, fmt.Errorf("%s: active %d + inactive %d + free %d != total %d blocks",
				labels[i], w.ActiveBlocks, w.InactiveBlocks, w.FreeBlocks, w.TotalBlocks))
		}
	}
	ended := s.Completed + s.Aborted + s.Rejected + s.Errored
	if s.Requests != ended+uint64(s.InFlight) {
		errs = append(errs, fmt.Errorf("requests %d != completed %d + aborted %d + rejected %d + errored %d + in flight %d",
			s.Requests, s.Completed, s.Aborted, s.Rejected, s.Errored, s.InFlight))
	}
	if s.Holds != s.HoldsReleased+s.HoldsAborted+s.HoldsCancelled+uint64(st.open) {
		errs = append(errs, fmt.Errorf("pins %d != released %d + aborted %d + cancelled %d + open %d",
			s.Holds, s.HoldsReleased, s.HoldsAborted, s.HoldsCancelled, st.open))
	}
	if st.causality > 0 {
		errs = append(errs, fmt.Errorf("%d requests went back in modeled time, e.g. %s", st.causality, st.example))
	}
	if st.settled && s.InFlight == 0 {
		for i, w := range s.Workers {
			if w.HeldBlocks != 0 || w.HeldRequests != 0 || w.ReservedBlocks != 0 || w.ActiveBlocks != 0 || w.Running != 0 || w.Waiting != 0 {
				errs = append(errs, fmt.Errorf("%s after drain: held %d blocks (%d requests), reserved %d, active %d, running %d, waiting %d; want all 0",
					labels[i], w.HeldBlocks, w.HeldRequests, w.ReservedBlocks, w.ActiveBlocks, w.Running, w.Waiting))
			}
		}
		if st.open != 0 {
			errs = append(errs, fmt.Errorf("%d holds still open after drain", st.open))
		}
		if s.TransfersStarted != s.TransfersCompleted+s.TransfersAborted {
			errs = append(errs, fmt.Errorf("transfers started %d != completed %d + aborted %d",
				s.TransfersStarted, s.TransfersCompleted, s.TransfersAborted))
		}
	}
	return errors.Join(errs...)
}
