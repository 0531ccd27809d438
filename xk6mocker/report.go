package xk6mocker

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/report"
)

// reportKey is the context key of WithReport.
type reportKey struct{}

// WithReport returns a copy of ctx that, given to harness.Run, asks for the
// run's report: f receives it once the run's end-of-test data is built
// (after teardown, before handleSummary or the text summary, also when the
// run was interrupted), while the clusters are still open. The report's
// Title is left for f to set. f is not called when the script never
// imports k6/x/mocker.
func WithReport(ctx context.Context, f func(report.Report)) context.Context {
	return context.WithValue(ctx, reportKey{}, f)
}

func reportFunc(ctx context.Context) func(report.Report) {
	if ctx == nil {
		return nil
	}
	f, _ := ctx.Value(reportKey{}).(func(report.Report))
	return f
}

// addReport hands the run's report to f when the harness has built the
// end-of-test data.
func addReport(rc harness.RunContext, r *run, f func(report.Report)) {
	if f == nil {
		return
	}
	if so, ok := rc.(harness.SummaryObserverRun); ok {
		so.OnSummaryData(func(data map[string]any) { f(r.report(data)) })
	}
}

// report assembles the run's report from its clusters and data.
func (r *run) report(data map[string]any) report.Report {
	r.mu.Lock()
	list := r.sortedEntries()
	r.mu.Unlock()
	out := report.Report{Summary: report.SummaryFrom(data)}
	for _, e := range list {
		out.Clusters = append(out.Clusters, e.report())
	}
	return out
}

func (e *entry) report() report.Cluster {
	st := e.stats()
	rc := report.Cluster{
		Name: e.name, Engine: e.engine, Router: e.router, Topology: e.topology,
		SpeedupRatio: e.scale.Ratio(), Stats: st, Series: e.c.Series(), Holds: e.holds(),
	}
	_, rc.ClockLagPeak = e.clockLag()
	e.mu.Lock()
	defer e.mu.Unlock()
	rc.TTFT = report.Quantiles("all", &e.seen.ttft)
	for _, o := range sortedKeys(e.seen.pins) {
		rc.HoldDurations = append(rc.HoldDurations, report.Quantiles(o, e.seen.pins[o]))
	}
	rc.Routed = routedPer(st.Workers, e.seen.routed)
	return rc
}

// routedPer lists the requests routed to each worker rank, named by the
// worker alone when it has one rank.
func routedPer(ws []cluster.WorkerStats, routed map[rankOf]uint64) []report.Routed {
	ranked := map[string]bool{} // workers with more than one data-parallel rank
	for _, w := range ws {
		ranked[w.Name] = ranked[w.Name] || w.DPRank > 0
	}
	out := make([]report.Routed, 0, len(ws))
	for _, w := range ws {
		label := w.Name
		if ranked[w.Name] {
			label = fmt.Sprintf("%s dp_rank %d", w.Name, w.DPRank)
		}
		out = append(out, report.Routed{Worker: label, Role: w.Role, Requests: routed[rankOf{w.Name, w.DPRank}]})
	}
	return out
}

// observed is what the report shows of the results a cluster returned,
// in memory bounded by the number of workers and outcomes.
type observed struct {
	ttft   metrics.Histogram
	pins   map[string]*metrics.Histogram // hold durations by outcome
	routed map[rankOf]uint64             // requests per worker rank
}

// rankOf names one data-parallel rank of a worker.
type rankOf struct {
	worker string
	rank   int
}

func (o *observed) add(res cluster.Result) {
	if res.OutputTokens > 0 {
		o.ttft.Add(res.TTFTMs)
	}
	if res.HoldOutcome != "" {
		if o.pins == nil {
			o.pins = map[string]*metrics.Histogram{}
		}
		h := o.pins[res.HoldOutcome]
		if h == nil {
			h = new(metrics.Histogram)
			o.pins[res.HoldOutcome] = h
		}
		h.Add(res.HoldMs)
	}
	if o.routed == nil {
		o.routed = map[rankOf]uint64{}
	}
	if res.PrefillWorker != "" {
		o.routed[rankOf{res.PrefillWorker, res.PrefillDPRank}]++
	}
	if res.DecodeWorker != "" && res.DecodeWorker != res.PrefillWorker {
		o.routed[rankOf{res.DecodeWorker, res.DecodeDPRank}]++
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// addProgress adds one line per cluster to the progress display: held
// blocks now and at the peak, holds aborted and prefills refused so far.
func addProgress(rc harness.RunContext, r *run) {
	if pr, ok := rc.(harness.ProgressRun); ok {
		pr.AddProgress(r.progressText)
	}
}

func (r *run) progressText() string {
	r.mu.Lock()
	list := r.sortedEntries()
	r.mu.Unlock()
	var b strings.Builder
	for _, e := range list {
		st := e.stats()
		fmt.Fprintf(&b, "cluster %s  held %d/%d blocks (now/peak)  %d aborts  %d refusals\n",
			e.name, st.HeldBlocks, st.PeakHeldBlocks, st.HoldsAborted, st.PrefillRejections)
	}
	return b.String()
}
