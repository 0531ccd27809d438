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
//   - A threshold on a Gauge, Rate or Trend that got no samples passes (as in
//     k6) but is flagged: "noSamples": true in the summary data and
//     "no samples" in the text summary. A Counter that never got a sample is
//     evaluated as count 0 and rate 0, since that is what it measured.
//   - Every threshold result carries the observed value ("observed").
//   - Samples whose value is NaN or ±Inf are dropped (and logged once),
//     because no sink or JSON encoder can represent them.
package metrics
