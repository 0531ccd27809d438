package report

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness/metrics"
)

// MaxHolds bounds the holds the timeline draws: the longest ones.
const MaxHolds = 200

// Report is everything one report shows.
type Report struct {
	// Title heads the page: the script's path, typically.
	Title string
	// Summary is the run's end-of-test data (SummaryFrom reads it from the
	// object handleSummary receives); nil leaves the harness section out.
	Summary *Summary
	// Clusters are the run's clusters, in the order shown.
	Clusters []Cluster
}

// Cluster is one cluster's figures and history.
type Cluster struct {
	Name, Engine, Router, Topology string
	// SpeedupRatio is modeled ms per script ms, for the script time shown
	// beside modeled time.
	SpeedupRatio float64
	Stats        cluster.Stats
	Series       cluster.Series
	// Holds are the holds known at the end (any order); the timeline draws
	// the MaxHolds longest.
	Holds []cluster.Hold
	// TTFT and HoldDurations describe the requests the plugin saw end, in
	// modeled ms; HoldDurations has one entry per hold outcome.
	TTFT          Distribution
	HoldDurations []Distribution
	// Routed counts the requests the router sent to each worker.
	Routed []Routed
	// ClockLagPeak is the furthest the cluster's loop fell behind the wall
	// clock: while it lags, modeled time runs slower than wall ×
	// SpeedupRatio.
	ClockLagPeak time.Duration
}

// Distribution is a set of durations as its percentiles.
type Distribution struct {
	// Label names the set ("completed", "transferred", "aborted").
	Label string
	Count uint64
	// Quantiles[i] is the i-th percentile in modeled ms, i = 0..100;
	// empty when Count is 0.
	Quantiles []float64
}

// Quantiles reads h as a Distribution of its 101 percentiles.
func Quantiles(label string, h *metrics.Histogram) Distribution {
	d := Distribution{Label: label, Count: h.Count()}
	if d.Count == 0 {
		return d
	}
	d.Quantiles = make([]float64, 101)
	for i := range d.Quantiles {
		d.Quantiles[i] = h.Percentile(float64(i))
	}
	return d
}

// Routed is one worker's share of the router's decisions.
type Routed struct {
	Worker   string
	Role     string // "prefill", "decode" or "aggregated"
	Requests uint64
}

// PeakHeldBlocks is the most blocks held across c at once, from its
// series: it equals c.Stats.PeakHeldBlocks when the series covers the run.
func (c *Cluster) PeakHeldBlocks() int {
	peak := 0
	for _, p := range c.Series.Points {
		peak = max(peak, p.HeldBlocks)
	}
	return peak
}

// longestHolds returns the n longest holds, longest first; a hold still
// open counts until the cluster's last known time.
func longestHolds(hs []cluster.Hold, n int, nowMs float64) []cluster.Hold {
	seen := make(map[uint64]bool, len(hs))
	out := make([]cluster.Hold, 0, len(hs))
	for _, h := range hs {
		if seen[h.RequestID] {
			continue
		}
		seen[h.RequestID] = true
		if h.Outcome == "" {
			h.EndMs = max(nowMs, h.StartMs)
			h.DurationMs = h.EndMs - h.StartMs
		}
		out = append(out, h)
	}
	return cluster.LongestFirst(out, n)
}

// Write renders r as one HTML document.
func Write(w io.Writer, r Report) error {
	page, err := build(r)
	if err != nil {
		return err
	}
	return pageTemplate.Execute(w, page)
}

// WriteFile renders r into the file at path, replacing it.
func WriteFile(path string, r Report) error {
	var b bytes.Buffer
	if err := Write(&b, r); err != nil {
		return fmt.Errorf("report %s: %w", path, err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
