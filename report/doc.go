// Package report renders one test run as a self-contained HTML file: the
// history of each mock cluster (held, active and free blocks per worker,
// decode queues, outcomes over time, hold timeline, routing, TTFT and hold
// durations) and the harness's figures (VUs, iterations, thresholds,
// checks). Charts are SVG drawn with gonum.org/v1/plot and inlined, with no
// script, font or image fetched at view time, so the file can be attached
// to a CI job and opened anywhere.
//
// Time axes are in modeled seconds, the cluster's own clock, with the
// script time alongside (script = modeled / speedup_ratio; the run's
// clock, which a paced run keeps with the wall clock).
//
// A Report's size is bounded whatever the run's length: the cluster series
// has at most 512 points, the timeline at most MaxHolds holds, the
// distributions 101 quantiles each.
package report
