package metrics

import "time"

// Sample is one measured value of a metric. Time may be left zero; outputs
// that need a timestamp then use the time the sample was collected.
type Sample struct {
	Metric *Metric
	Tags   Tags
	Time   time.Time
	Value  float64
}

// Output receives every collected sample, e.g. the NDJSON writer. AddSamples
// may be called from several goroutines and must not keep the slice after it
// returns (the Collector reuses it).
type Output interface {
	AddSamples([]Sample)
	Close() error
}

// ThresholdAware is implemented by outputs that describe the thresholds of a
// metric (k6's JSON output lists them in each "Metric" line). NewCollector
// calls SetThresholds before the first sample.
type ThresholdAware interface {
	SetThresholds(*ThresholdSet)
}

// Flusher is implemented by outputs that buffer what AddSamples gets:
// Flush pushes it to the underlying writer (file) now. The Collector calls
// it from Flush, which the runner calls every second.
type Flusher interface {
	Flush() error
}
