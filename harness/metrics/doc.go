// Package metrics is the measuring side of mocker's load harness: a registry
// of k6-style metrics (Counter, Gauge, Rate, Trend), tagged samples, a
// concurrency-safe Collector that aggregates them into bounded-memory sinks,
// thresholds in k6's grammar (with tag-filtered submetrics and abortOnFail),
// the handleSummary data shape, the end-of-test text summary and the NDJSON
// stream that k6 writes with --out json.
//
// Behaviour that differs from k6 on purpose:
//
//   - Trends never keep raw samples. They feed a log-linear histogram (see
//     Histogram) with exact count, min, max and sum, so avg/min/max are exact
//     and percentiles are within 0.8% relative error of the true order
//     statistics for positive (or all-negative) data. Memory grows with the
//     number of distinct powers of two seen, not with the number of samples.
//   - A threshold on a Rate that got no samples is skipped, as in k6, and
//     flagged: "noSamples": true in the summary data and "no samples" in
//     the text summary. (Also as in k6, an empty Counter, Gauge or Trend is
//     evaluated as zeros at the end of the test.)
//   - Every threshold result carries the observed value ("observed").
//   - Samples whose value is NaN or ±Inf are dropped (and logged once),
//     because no sink or JSON encoder can represent them.
package metrics
