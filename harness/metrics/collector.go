package metrics

import (
	"errors"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// outputBatch is how many samples the Collector gathers before handing them
// to its outputs: large enough that output locking is amortised, small
// enough that a crash loses little.
const outputBatch = 1024

// Collector aggregates samples into one sink per metric plus one per
// tag-filtered submetric that a threshold names, evaluates thresholds, and
// forwards samples to outputs in batches. It is safe for concurrent use.
type Collector struct {
	reg  *Registry
	th   *ThresholdSet
	outs []Output

	// states is indexed by Metric.id and replaced (copy-on-write) when a new
	// metric shows up, so the per-sample lookup is an atomic load and an
	// index, with no lock and no map.
	states  atomic.Pointer[[]*metricState]
	mu      sync.Mutex // serialises growth of states and foreign
	foreign map[*Metric]*metricState

	bound []boundEntry

	resMu   sync.Mutex
	results []ThresholdResult

	batchMu   sync.Mutex
	batch     []Sample
	spare     []Sample
	closed    bool
	deliverMu sync.Mutex // keeps batches in order across goroutines

	closeOnce   sync.Once
	closeErr    error
	warnedNaN   atomic.Bool
	warnedFlush atomic.Bool
}

type metricState struct {
	metric *Metric
	sink   *sink
	subs   []*submetric // only metrics that thresholds filter have any
	forced bool         // shown in the summary even without samples
}

type submetric struct {
	filter Tags
	sink   *sink
}

type boundEntry struct {
	entry *thresholdEntry
	sink  *sink
}

// ThresholdResult is the outcome of one threshold at the last evaluation.
type ThresholdResult struct {
	Key            string  // thresholds key in display form
	Source         string  // expression as written
	Aggregation    string  // canonical left-hand side, e.g. "p(95)"
	OK             bool    // passed (always true when NoSamples)
	Observed       float64 // the aggregation's value (0 when NoSamples)
	NoSamples      bool    // skipped: an empty Rate, or any empty metric while the test runs
	AbortOnFail    bool
	DelayAbortEval time.Duration
}

// NewCollector prepares sinks for every metric and submetric that th names
// (th may be nil). Outputs that implement ThresholdAware are told about th.
func NewCollector(reg *Registry, th *ThresholdSet, outs ...Output) *Collector {
	c := &Collector{reg: reg, th: th, outs: outs, foreign: map[*Metric]*metricState{}}
	empty := []*metricState{}
	c.states.Store(&empty)
	if th != nil {
		for _, e := range th.entries {
			st := c.stateFor(e.metric)
			c.mu.Lock()
			st.forced = true
			s := st.sink
			if e.filter.Len() > 0 {
				s = nil
				for _, sub := range st.subs {
					if sub.filter.Equal(e.filter) {
						s = sub.sink
					}
				}
				if s == nil {
					s = newSink(e.metric.Type)
					st.subs = append(st.subs, &submetric{filter: e.filter, sink: s})
				}
			}
			c.mu.Unlock()
			c.bound = append(c.bound, boundEntry{entry: e, sink: s})
		}
	}
	for _, o := range outs {
		if ta, ok := o.(ThresholdAware); ok {
			ta.SetThresholds(th)
		}
	}
	return c
}

// stateFor returns the aggregation state of m, creating it on first use.
func (c *Collector) stateFor(m *Metric) *metricState {
	if m.reg == c.reg {
		if states := *c.states.Load(); m.id < len(states) {
			if st := states[m.id]; st != nil {
				return st
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.reg != c.reg {
		// A metric from another registry: correct but slower.
		st, ok := c.foreign[m]
		if !ok {
			st = &metricState{metric: m, sink: newSink(m.Type)}
			c.foreign[m] = st
		}
		return st
	}
	old := *c.states.Load()
	if m.id < len(old) && old[m.id] != nil {
		return old[m.id]
	}
	grown := make([]*metricState, max(len(old), m.id+1))
	copy(grown, old)
	st := &metricState{metric: m, sink: newSink(m.Type)}
	grown[m.id] = st
	c.states.Store(&grown)
	return st
}

// Add aggregates samples. It is the hot path, called from every VU
// goroutine: with no outputs it allocates nothing, and tag matching only
// happens for metrics that have tag-filtered submetrics. Samples with a nil
// Metric are ignored; NaN or infinite values are dropped and logged once.
func (c *Collector) Add(samples ...Sample) {
	for i := range samples {
		s := &samples[i]
		if s.Metric == nil {
			continue
		}
		if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			c.warnNonFinite(s)
			continue
		}
		st := c.stateFor(s.Metric)
		st.sink.add(s.Value)
		for _, sub := range st.subs {
			if s.Tags.Contains(sub.filter) {
				sub.sink.add(s.Value)
			}
		}
	}
	if len(c.outs) > 0 {
		c.enqueue(samples)
	}
}

func (c *Collector) warnNonFinite(s *Sample) {
	if c.warnedNaN.CompareAndSwap(false, true) {
		slog.Warn("dropping metric samples that are not finite numbers (further drops are not logged)",
			"metric", s.Metric.Name, "value", s.Value)
	}
}

func (c *Collector) enqueue(samples []Sample) {
	var now time.Time
	c.batchMu.Lock()
	if c.closed {
		c.batchMu.Unlock()
		return
	}
	for i := range samples {
		s := samples[i]
		if s.Metric == nil || math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			continue
		}
		if s.Time.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			s.Time = now
		}
		c.batch = append(c.batch, s)
	}
	if len(c.batch) < outputBatch {
		c.batchMu.Unlock()
		return
	}
	c.deliverLocked()
}

// deliverLocked hands the current batch to the outputs. It is called with
// batchMu held and releases it; deliverMu is taken before batchMu is
// released so batches reach the outputs in the order they were filled.
func (c *Collector) deliverLocked() {
	full := c.batch
	c.batch, c.spare = c.spare[:0], nil
	c.deliverMu.Lock()
	c.batchMu.Unlock()
	if len(full) > 0 {
		for _, o := range c.outs {
			o.AddSamples(full)
		}
	}
	c.deliverMu.Unlock()
	clear(full) // drop references to tags and metrics
	c.batchMu.Lock()
	if c.spare == nil {
		c.spare = full[:0]
	}
	c.batchMu.Unlock()
}

// Flush hands buffered samples to the outputs now and flushes the outputs
// that buffer (Flusher). The runner calls it every second so that a live
// NDJSON file stays current and a killed run keeps what was flushed.
func (c *Collector) Flush() {
	c.batchMu.Lock()
	if c.closed {
		c.batchMu.Unlock()
		return
	}
	c.deliverLocked()
	for _, o := range c.outs {
		if f, ok := o.(Flusher); ok {
			if err := f.Flush(); err != nil && c.warnedFlush.CompareAndSwap(false, true) {
				slog.Warn("flushing an output failed (further failures are not logged)", "error", err)
			}
		}
	}
}

// Close flushes buffered samples and closes every output, joining their
// errors. Later calls return the same error; samples added after Close are
// still aggregated but no longer reach outputs.
func (c *Collector) Close() error {
	c.closeOnce.Do(func() {
		c.batchMu.Lock()
		c.deliverLocked()
		c.batchMu.Lock()
		c.closed = true
		c.batchMu.Unlock()
		var errs []error
		for _, o := range c.outs {
			errs = append(errs, o.Close())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// Evaluate is the end-of-test evaluation of every threshold as of elapsed
// (the time since the test started, used for Counter rates and
// delayAbortEval). failed is true when any threshold does not hold; abort is
// true when one of those has abortOnFail and elapsed ≥ its delayAbortEval.
// Results keeps the outcome. As in k6, a metric without samples counts as
// zeros: a Counter's count and rate, a Gauge's value and every statistic of
// a Trend are 0 (so count>0, value>3 and p(95)>100 fail); only thresholds
// on an empty Rate are skipped, passing with NoSamples.
func (c *Collector) Evaluate(elapsed time.Duration) (failed bool, abort bool) {
	return c.evaluateAndKeep(elapsed, false)
}

// EvaluateRunning is Evaluate for the checks made while the test runs: a
// threshold on a metric or submetric that has no samples yet is skipped
// (reported as passing with NoSamples), whatever the metric type, so that
// an abortOnFail threshold cannot abort a test before its metric had a
// chance to be measured.
func (c *Collector) EvaluateRunning(elapsed time.Duration) (failed bool, abort bool) {
	return c.evaluateAndKeep(elapsed, true)
}

func (c *Collector) evaluateAndKeep(elapsed time.Duration, running bool) (failed bool, abort bool) {
	rs := c.evaluate(elapsed, running)
	for _, r := range rs {
		if r.OK {
			continue
		}
		failed = true
		if r.AbortOnFail && elapsed >= r.DelayAbortEval {
			abort = true
		}
	}
	c.resMu.Lock()
	c.results = rs
	c.resMu.Unlock()
	return failed, abort
}

// Results returns the threshold outcomes of the last Evaluate, sorted by key
// then by position in the configuration.
func (c *Collector) Results() []ThresholdResult {
	c.resMu.Lock()
	defer c.resMu.Unlock()
	out := make([]ThresholdResult, len(c.results))
	copy(out, c.results)
	return out
}

// FailedKeys returns the sorted, distinct keys of the failed results, for
// k6's "thresholds on metrics 'a, b' have been crossed" message. With
// abortOnly it keeps only thresholds that have abortOnFail.
func FailedKeys(rs []ThresholdResult, abortOnly bool) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		if r.OK || (abortOnly && !r.AbortOnFail) || seen[r.Key] {
			continue
		}
		seen[r.Key] = true
		out = append(out, r.Key)
	}
	sort.Strings(out)
	return out
}

func (c *Collector) evaluate(elapsed time.Duration, running bool) []ThresholdResult {
	var rs []ThresholdResult
	for _, b := range c.bound {
		empty := running && b.sink.empty()
		for _, it := range b.entry.items {
			v, ok := 0.0, false
			if !empty {
				v, ok = b.sink.aggregate(it.expr, elapsed)
			}
			r := ThresholdResult{
				Key: b.entry.key, Source: it.Source, Aggregation: it.expr.Aggregation(),
				AbortOnFail: it.AbortOnFail, DelayAbortEval: it.DelayAbortEval,
			}
			if ok {
				r.Observed, r.OK = v, it.expr.Holds(v)
			} else {
				r.NoSamples, r.OK = true, true
			}
			rs = append(rs, r)
		}
	}
	return rs
}

// allStates returns every metric state, sorted by metric name.
func (c *Collector) allStates() []*metricState {
	c.mu.Lock()
	var out []*metricState
	for _, st := range *c.states.Load() {
		if st != nil {
			out = append(out, st)
		}
	}
	for _, st := range c.foreign {
		out = append(out, st)
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].metric.Name < out[j].metric.Name })
	return out
}
