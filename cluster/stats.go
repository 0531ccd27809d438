package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
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
	// Pins counts prefill KV holds started; PinsReleased those that ended
	// by a transfer, PinsAborted those given up (abort or session timeout,
	// cancellation). Pins − PinsReleased − PinsAborted holds last now.
	Pins         uint64 `json:"pins"`
	PinsReleased uint64 `json:"pins_released"`
	PinsAborted  uint64 `json:"pins_aborted"`
	// PinMsTotal and PinMsMax sum and bound the modeled duration of ended
	// holds.
	PinMsTotal float64 `json:"pin_ms_total"`
	PinMsMax   float64 `json:"pin_ms_max"`
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
	// NowMs is the cluster's modeled time.
	NowMs   float64       `json:"now_ms"`
	Workers []WorkerStats `json:"workers"`
}

// WorkerStats is one worker's occupancy, in blocks and requests.
type WorkerStats struct {
	Name           string `json:"name"`
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
	// TransferAddr is a prefill worker's transfer server ("host:port").
	TransferAddr string `json:"transfer_addr,omitempty"`
}

// Stats reads the workers' occupancy now (their last report once closed)
// and the counters.
func (c *Cluster) Stats() Stats {
	ws := c.workerStats()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statsLocked(ws)
}

// workerStats asks every worker for its occupancy. A live worker answers
// after delivering every output already due, so the outputs behind what it
// reports are in the dispatcher's queue by then.
func (c *Cluster) workerStats() []WorkerStats {
	ws := make([]WorkerStats, len(c.workers))
	for i, w := range c.workers {
		m := w.live.Metrics()
		if m.TotalBlocks == 0 { // stopped
			c.mu.Lock()
			m = w.last
			c.mu.Unlock()
		}
		ws[i] = WorkerStats{
			Name: w.name, Role: string(w.role),
			TotalBlocks: m.TotalBlocks, ActiveBlocks: m.ActiveBlocks, InactiveBlocks: m.InactiveBlocks,
			FreeBlocks: m.FreeBlocks, HeldBlocks: m.HeldBlocks, ReservedBlocks: m.ReservedBlocks,
			Running: m.Running, Waiting: m.Waiting, HeldRequests: m.HeldRequests, Passes: m.Passes,
		}
		if w.server != nil {
			ws[i].TransferAddr = w.server.AdvertisedAddr()
		}
	}
	return ws
}

// statsLocked builds Stats from ws and the counters, under c.mu.
func (c *Cluster) statsLocked(ws []WorkerStats) Stats {
	k := c.stats
	s := Stats{
		Requests: k.requests, Completed: k.completed, Aborted: k.aborted, Rejected: k.rejected, Errored: k.errored,
		InFlight: c.active, PrefillRejections: k.prefillRejections,
		Pins: k.pins, PinsReleased: k.pinsReleased, PinsAborted: k.pinsAborted,
		PinMsTotal: k.pinMsTotal, PinMsMax: k.pinMsMax,
		TransfersStarted: k.transfersStarted, TransfersCompleted: k.transfersDone, TransfersAborted: k.transfersLost,
		PeakHeldBlocks: k.peakHeld,
		Workers:        ws,
	}
	if !c.closed {
		s.NowMs = c.Now()
	}
	for _, w := range ws {
		s.HeldBlocks += w.HeldBlocks
		s.ReservedBlocks += w.ReservedBlocks
		s.ActiveBlocks += w.ActiveBlocks
	}
	return s
}

// Holds returns the stranding graph's recent history: every hold still
// open, the longest ended holds and the most recent ones (memory stays
// bounded however long the cluster runs), sorted by start.
func (c *Cluster) Holds() []Hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forensic.holds()
}

// HoldGraph aggregates every hold since New by (prefill worker, decode
// worker), sorted by names.
func (c *Cluster) HoldGraph() []HoldEdge {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forensic.graph()
}

// Events returns the most recent forensic events, oldest first.
func (c *Cluster) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forensic.recentEvents()
}

// drainPoll is how often Drain looks at the workers.
const drainPoll = 2 * time.Millisecond

// Drain waits until no request is in flight and no worker holds, reserves,
// runs or queues anything, then returns the stats. It does not stop new
// requests: call it when the load has ended. When ctx ends first it returns
// the stats so far and an error saying what was still busy.
func (c *Cluster) Drain(ctx context.Context) (Stats, error) {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	quiet := 0
	for {
		s := c.Stats()
		busy := c.busyReason(s)
		// Quiet on two polls in a row: an input a worker has just applied
		// flushes its events on the driver's next turn.
		if busy == "" {
			if quiet++; quiet == 2 {
				return s, nil
			}
		} else {
			quiet = 0
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("drain: %s: %w", busy, ctx.Err())
		case <-c.closing:
			return s, errors.New("drain: cluster closed")
		case <-t.C:
		}
	}
}

// busyReason says what keeps the cluster from being drained, "" when
// nothing does.
func (c *Cluster) busyReason(s Stats) string {
	if s.InFlight > 0 {
		return fmt.Sprintf("%d requests in flight", s.InFlight)
	}
	for _, w := range s.Workers {
		if w.HeldRequests > 0 || w.ReservedBlocks > 0 || w.Running > 0 || w.Waiting > 0 || w.ActiveBlocks > 0 {
			return fmt.Sprintf("%s busy (held %d requests, reserved %d blocks, running %d, waiting %d, active %d blocks)",
				w.Name, w.HeldRequests, w.ReservedBlocks, w.Running, w.Waiting, w.ActiveBlocks)
		}
	}
	if w := c.undelivered(); w != "" {
		return w
	}
	if !c.queue.idle() {
		return "worker outputs not yet applied"
	}
	return ""
}

// undelivered names a worker whose pass in flight has not delivered its
// output (events a worker applied ahead of the wall clock, at the pass's
// end, ride with it), "" when there is none.
func (c *Cluster) undelivered() string {
	for _, w := range c.workers {
		if ran, got := w.live.Passes(), w.delivered.Load(); ran != got {
			return fmt.Sprintf("%s: %d passes run, %d delivered", w.name, ran, got)
		}
	}
	return ""
}

// CheckInvariants checks DESIGN §9 and returns every violation, joined;
// nil when all hold. Always: per worker active + inactive + free = total
// blocks; requests = completed + aborted + rejected + errored + in flight;
// pins = released + aborted + open holds; modeled time never went
// backwards for a request (arrival ≤ first token ≤ last token). When no
// request is in flight and every worker output is applied (after Drain),
// also: no block held, reserved or active on any worker, no hold open, and
// transfers started = transfers completed + transfers aborted.
//
// The counters, the open holds and the "everything applied" condition are
// read in one critical section, after the workers' reports: a worker
// output applied while the check runs can never make it compare counters
// from before the output with a queue found empty after it. The drained
// checks apply only when no request was in flight from before the
// workers' reports to that section, so the reports are not older than the
// end of the last request.
func (c *Cluster) CheckInvariants() error {
	c.mu.Lock()
	idleBefore, requestsBefore := c.active == 0, c.stats.requests
	c.mu.Unlock()
	ws := c.workerStats()
	delivered := c.undelivered() == ""
	c.mu.Lock()
	s := c.statsLocked(ws)
	open := len(c.forensic.open)
	causality, example := c.stats.causality, c.stats.causalityExample
	settled := idleBefore && requestsBefore == s.Requests && delivered && s.InFlight == 0 && c.queue.idle()
	c.mu.Unlock()

	var errs []error
	for _, w := range s.Workers {
		if w.ActiveBlocks+w.InactiveBlocks+w.FreeBlocks != w.TotalBlocks {
			errs = append(errs, fmt.Errorf("%s: active %d + inactive %d + free %d != total %d blocks",
				w.Name, w.ActiveBlocks, w.InactiveBlocks, w.FreeBlocks, w.TotalBlocks))
		}
	}
	ended := s.Completed + s.Aborted + s.Rejected + s.Errored
	if s.Requests != ended+uint64(s.InFlight) {
		errs = append(errs, fmt.Errorf("requests %d != completed %d + aborted %d + rejected %d + errored %d + in flight %d",
			s.Requests, s.Completed, s.Aborted, s.Rejected, s.Errored, s.InFlight))
	}
	if s.Pins != s.PinsReleased+s.PinsAborted+uint64(open) {
		errs = append(errs, fmt.Errorf("pins %d != released %d + aborted %d + open %d", s.Pins, s.PinsReleased, s.PinsAborted, open))
	}
	if causality > 0 {
		errs = append(errs, fmt.Errorf("%d requests went back in modeled time, e.g. %s", causality, example))
	}
	if settled {
		for _, w := range s.Workers {
			if w.HeldBlocks != 0 || w.HeldRequests != 0 || w.ReservedBlocks != 0 || w.ActiveBlocks != 0 {
				errs = append(errs, fmt.Errorf("%s after drain: held %d blocks (%d requests), reserved %d, active %d; want all 0",
					w.Name, w.HeldBlocks, w.HeldRequests, w.ReservedBlocks, w.ActiveBlocks))
			}
		}
		if open != 0 {
			errs = append(errs, fmt.Errorf("%d holds still open after drain", open))
		}
		if s.TransfersStarted != s.TransfersCompleted+s.TransfersAborted {
			errs = append(errs, fmt.Errorf("transfers started %d != completed %d + aborted %d",
				s.TransfersStarted, s.TransfersCompleted, s.TransfersAborted))
		}
	}
	return errors.Join(errs...)
}
