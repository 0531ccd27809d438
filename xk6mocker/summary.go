package xk6mocker

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
)

// longestShown is how many of the longest holds the summary lists.
const longestShown = 5

// writeSummary is the run's summary section: one "KV handoff" block per
// cluster the run used, nothing when it used none.
func (r *run) writeSummary(w io.Writer) {
	r.mu.Lock()
	list := r.sortedEntries()
	r.mu.Unlock()
	for _, e := range list {
		writeEntrySummary(w, e)
	}
}

// ClusterSummary is one cluster's KV handoff figures: the "KV HANDOFF"
// section of the text summary and, under mocker.clusters[name], the
// summary data of handleSummary and --summary-export. Times are modeled ms.
type ClusterSummary struct {
	Engine   string `json:"engine"`
	Router   string `json:"router"`
	Topology string `json:"topology"` // "2 prefill / 2 decode", "4 aggregated"
	// Transport is how the workers are reached: "in-process", "local"
	// (child processes over an embedded etcd and NATS) or "etcd+nats".
	Transport string        `json:"transport"`
	Requests  RequestCounts `json:"requests"`
	Holds     HoldCounts    `json:"holds"`
	// HoldDurationMs describes the holds whose end a request saw; nil when
	// none did.
	HoldDurationMs *HoldDurations `json:"hold_duration_ms"`
	PeakHeldBlocks int            `json:"peak_held_blocks"`
	// PrefillRefusals counts requests refused because every prefill worker
	// was busy: the cascade.
	PrefillRefusals uint64 `json:"prefill_refusals"`
	// TierStats are the workers' KV tiers below their GPU pools summed,
	// at the end: each figure absent without its tier.
	cluster.TierStats
	// LongestHolds are the longest ended holds, longest first.
	LongestHolds []cluster.Hold `json:"longest_holds"`
	// ClockLagPeakMs is the most wall time the cluster's loop ran behind
	// the wall clock; LagWarning says when that was over a tenth of the
	// run: the host could not keep up, so the script's pacing offered
	// less modeled load than it says (modeled results are still exact).
	ClockLagPeakMs float64 `json:"clock_lag_peak_ms"`
	LagWarning     string  `json:"lag_warning,omitempty"`
	// ModeledMs is how far the cluster's modeled clock got (script time
	// × speedup_ratio, from the cluster's start); SpeedupRatio the ratio.
	ModeledMs    float64 `json:"modeled_ms"`
	SpeedupRatio float64 `json:"speedup_ratio"`
	// PlaneRejected counts the messages a distributed cluster's request
	// plane dropped at its gates, unapplied: forged, replayed, malformed
	// or past a bound (docs/distributed-security.md); absent when none.
	PlaneRejected uint64 `json:"plane_rejected_total,omitempty"`
}

// RequestCounts counts a cluster's requests by how they ended.
type RequestCounts struct {
	Total     uint64 `json:"total"`
	Completed uint64 `json:"completed"`
	Aborted   uint64 `json:"aborted"`
	Rejected  uint64 `json:"rejected"`
	Error     uint64 `json:"error"`
	// OutsideIterations ended after their VU was interrupted (e.g. by
	// gracefulStop): they are not in the mocker_* metrics.
	OutsideIterations uint64 `json:"outside_iterations"`
}

// HoldCounts counts a cluster's prefill KV holds.
type HoldCounts struct {
	Started   uint64 `json:"started"`
	Released  uint64 `json:"released"`  // by a transfer
	Aborted   uint64 `json:"aborted"`   // by the abort or session deadline
	Cancelled uint64 `json:"cancelled"` // given up: the request was refused, withdrawn or cut short
	Held      uint64 `json:"held"`      // still held at the summary
}

// HoldDurations summarises hold durations, in modeled ms.
type HoldDurations struct {
	Count uint64  `json:"count"`
	Avg   float64 `json:"avg"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// SummaryData is the value of the summary data's "mocker" key.
type SummaryData struct {
	// Clusters are the run's clusters by name.
	Clusters map[string]ClusterSummary `json:"clusters"`
}

// addSummaryData adds the run's "mocker" key to the summary data, where
// the harness supports it.
func addSummaryData(rc harness.RunContext, r *run) {
	if sd, ok := rc.(harness.SummaryDataRun); ok {
		sd.AddSummaryData("mocker", func() any { return r.summaryData() })
	}
}

func (r *run) summaryData() SummaryData {
	r.mu.Lock()
	list := r.sortedEntries()
	r.mu.Unlock()
	out := SummaryData{Clusters: make(map[string]ClusterSummary, len(list))}
	for _, e := range list {
		out.Clusters[e.name] = e.summary()
	}
	return out
}

// summary reads e's figures now.
func (e *entry) summary() ClusterSummary {
	st := e.stats()
	s := ClusterSummary{Engine: e.engine, Router: e.router, Topology: e.topology, Transport: e.c.TransportName()}
	rq := &s.Requests
	rq.Total, rq.Completed, rq.Aborted, rq.Rejected, rq.Error = st.Requests, st.Completed, st.Aborted, st.Rejected, st.Errored
	if ended, rec := st.Completed+st.Aborted+st.Rejected+st.Errored, e.recorded.Load(); ended > rec {
		rq.OutsideIterations = ended - rec
	}
	s.Holds.Started, s.Holds.Released, s.Holds.Aborted, s.Holds.Cancelled = st.Holds, st.HoldsReleased, st.HoldsAborted, st.HoldsCancelled
	if open := int64(st.Holds) - int64(st.HoldsReleased) - int64(st.HoldsAborted) - int64(st.HoldsCancelled); open > 0 {
		s.Holds.Held = uint64(open)
	}
	if n, avg, p50, p90, p99, mx := e.pinSummary(); n > 0 {
		s.HoldDurationMs = &HoldDurations{Count: n, Avg: avg, P50: p50, P90: p90, P99: p99, Max: mx}
	}
	s.PeakHeldBlocks = st.PeakHeldBlocks
	s.PrefillRefusals = st.PrefillRejections
	s.TierStats = st.TierStats
	s.LongestHolds = longestHolds(e.holds(), longestShown)
	lag := e.lag()
	s.ClockLagPeakMs = lag.PeakMs
	s.LagWarning = lagWarning(lag, e.scale.Ratio(), e.stepped)
	s.ModeledMs = e.modeledNow()
	s.SpeedupRatio = e.scale.Ratio()
	if p, ok := e.c.Transport().(interface{ PlaneRejected() uint64 }); ok {
		s.PlaneRejected = p.PlaneRejected()
	}
	return s
}

// lagWarning is the summary's warning when the cluster's loop fell behind
// the wall clock by over a tenth of the run, "" otherwise.
func lagWarning(lag cluster.LagReport, speedup float64, paced bool) string {
	if !lag.Excessive() {
		return ""
	}
	if paced {
		return fmt.Sprintf("the run's paced clock ran up to %s behind the wall clock (over 10%% of the run's %s): the host could not keep up, so the run took longer than its script says; modeled results are unaffected. Run with less load beside it, or use --clock virtual",
			ms(lag.PeakMs), ms(lag.RunMs))
	}
	return fmt.Sprintf("the cluster's loop ran up to %s behind the wall clock (over 10%% of the run's %s): the host could not keep up at speedup_ratio %g, so the script's wall-clock pacing offered less modeled load than it says; modeled results are unaffected. Lower speedup_ratio, or run with less load beside it",
		ms(lag.PeakMs), ms(lag.RunMs), speedup)
}

func writeEntrySummary(w io.Writer, e *entry) {
	s := e.summary()
	var b strings.Builder
	topo := s.Topology
	if s.Transport != "in-process" {
		topo += ", transport " + s.Transport
	}
	fmt.Fprintf(&b, "\n  █ KV HANDOFF  cluster %q: %s, router %s, %s\n\n", e.name, s.Engine, s.Router, topo)
	line := func(label, value string) {
		fmt.Fprintf(&b, "    %s%s: %s\n", label, strings.Repeat(".", max(2, 22-len([]rune(label)))), value)
	}
	rq := s.Requests
	line("requests", fmt.Sprintf("%d (completed %d, aborted %d, rejected %d, error %d)",
		rq.Total, rq.Completed, rq.Aborted, rq.Rejected, rq.Error))
	if rq.OutsideIterations > 0 {
		line("outside iterations", fmt.Sprintf("%d requests ended after their VU was interrupted (e.g. by gracefulStop): not in the mocker_* metrics", rq.OutsideIterations))
	}
	line("holds started", fmt.Sprint(s.Holds.Started))
	line("released", fmt.Sprintf("%d (transferred)", s.Holds.Released))
	line("aborted", fmt.Sprintf("%d (abort or session deadline)", s.Holds.Aborted))
	if s.Holds.Cancelled > 0 {
		line("cancelled", fmt.Sprintf("%d (request refused, withdrawn or cut short while holding)", s.Holds.Cancelled))
	}
	if s.Holds.Held > 0 {
		line("still held", fmt.Sprint(s.Holds.Held))
	}
	if d := s.HoldDurationMs; d != nil {
		line("hold duration", fmt.Sprintf("avg=%s p(50)=%s p(90)=%s p(99)=%s max=%s",
			ms(d.Avg), ms(d.P50), ms(d.P90), ms(d.P99), ms(d.Max)))
	}
	line("peak held blocks", fmt.Sprint(s.PeakHeldBlocks))
	line("prefill refusals", fmt.Sprint(s.PrefillRefusals))
	if s.G2Capacity > 0 {
		line("host (G2) tier", fmt.Sprintf("%d of %d blocks, %d onboarded", s.G2Blocks, s.G2Capacity, s.G2Onboarded))
	}
	if s.G3Capacity > 0 {
		line("disk (G3) tier", fmt.Sprintf("%d of %d blocks, %d onboarded", s.G3Blocks, s.G3Capacity, s.G3Onboarded))
	}
	if s.G4Blocks > 0 {
		line("object (G4) tier", fmt.Sprintf("%d blocks, %d onboarded", s.G4Blocks, s.G4Onboarded))
	}
	line("modeled time", fmt.Sprintf("%s (script time × speedup_ratio %g)", ms(s.ModeledMs), s.SpeedupRatio))
	if s.PlaneRejected > 0 {
		line("plane rejected", fmt.Sprintf("WARN %d request-plane messages dropped unapplied (forged, replayed, malformed, past a bound, or a connect to a transfer address no prefill advertised)", s.PlaneRejected))
	}
	if s.LagWarning != "" {
		line("clock lag", "WARN "+s.LagWarning)
	}
	if len(s.LongestHolds) > 0 {
		b.WriteString("\n    longest holds (prefill → decode)\n")
		for _, h := range s.LongestHolds {
			outcome := h.Outcome
			if outcome == "" {
				outcome = "held"
			}
			fmt.Fprintf(&b, "      %-12s → %-12s %10s  %-11s transfer %d\n",
				h.PrefillWorker, orDash(h.DecodeWorker), ms(h.DurationMs), outcome, h.TransferID)
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// longestHolds returns the n longest ended holds, longest first.
func longestHolds(hs []cluster.Hold, n int) []cluster.Hold {
	ended := make([]cluster.Hold, 0, len(hs))
	for _, h := range hs {
		if h.Outcome != "" {
			ended = append(ended, h)
		}
	}
	return cluster.LongestFirst(ended, n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ms formats modeled milliseconds the way the text summary formats times.
func ms(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v >= 1:
		return fmt.Sprintf("%.2fms", v)
	default:
		return fmt.Sprintf("%.0fµs", v*1000)
	}
}
