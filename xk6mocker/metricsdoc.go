package xk6mocker

import "github.com/kvstrand/mocker/harness/metrics"

// CommonTags are the tags of every sample the module pushes.
var CommonTags = []string{"cluster", "engine", "router"}

// MetricDoc describes one metric of the module for people: `mocker
// metrics`, docs/metrics.md. MetricDocs holds one per registered metric.
type MetricDoc struct {
	// Name is the metric's name, as thresholds refer to it.
	Name string
	// Type and Contains are what the module registers it as.
	Type     metrics.MetricType
	Contains metrics.ValueType
	// Tags are the tags its samples carry besides CommonTags, as
	// "key" or "key=value" when the value is always the same.
	Tags []string
	// Meaning says when a sample is pushed and what it measures.
	Meaning string
}

// MetricDocs documents every metric the module registers, in the order a
// reader meets them. A test holds it to registerMetrics and to the tags of
// the samples a run pushes.
var MetricDocs = []MetricDoc{
	{Name: MetricRequests, Type: metrics.Counter, Contains: metrics.Default, Tags: []string{"outcome"},
		Meaning: "One per request that ended, by outcome: completed, aborted, rejected or error."},
	{Name: MetricRequestsLost, Type: metrics.Counter, Contains: metrics.Default,
		Meaning: "Requests whose outcome is not in the other metrics: ended after their VU was interrupted (a gracefulStop that ran out, a cluster that stopped answering), or still without an outcome when drain gave up. cluster.drain() counts them, so drain in teardown."},
	{Name: MetricRequestFailed, Type: metrics.Rate, Contains: metrics.Default,
		Meaning: "One per request: non-zero when its outcome is not completed."},
	{Name: MetricTTFT, Type: metrics.Trend, Contains: metrics.Time, Tags: []string{"outcome"},
		Meaning: "Arrival to first token (modeled ms), for requests that got a first token."},
	{Name: MetricITL, Type: metrics.Trend, Contains: metrics.Time, Tags: []string{"outcome"},
		Meaning: "Mean gap between output tokens after the first (modeled ms), for requests with two or more tokens."},
	{Name: MetricE2E, Type: metrics.Trend, Contains: metrics.Time, Tags: []string{"outcome"},
		Meaning: "Arrival to last token (modeled ms), for completed requests."},
	{Name: MetricKVPins, Type: metrics.Counter, Contains: metrics.Default, Tags: []string{"role=prefill"},
		Meaning: "A prefill worker started holding a request's KV for the handoff."},
	{Name: MetricKVPinDuration, Type: metrics.Trend, Contains: metrics.Time, Tags: []string{"role=prefill", "outcome"},
		Meaning: "How long a hold lasted (modeled ms), when it ended; outcome transferred or aborted. An aborted hold lasts the abort timeout."},
	{Name: MetricKVAborts, Type: metrics.Counter, Contains: metrics.Default, Tags: []string{"role=prefill"},
		Meaning: "A hold was given up (abort or session timeout) and its KV freed."},
	{Name: MetricKVTransfer, Type: metrics.Trend, Contains: metrics.Time,
		Meaning: "Modeled KV transfer time of a transferred hold (kv_bytes_per_token and kv_transfer_bandwidth)."},
	{Name: MetricDecodeWait, Type: metrics.Trend, Contains: metrics.Time, Tags: []string{"role=decode", "outcome"},
		Meaning: "How long the decode worker waited for its reservation (modeled ms), when the hold ended; outcome is the hold's."},
	{Name: MetricPrefillRejection, Type: metrics.Counter, Contains: metrics.Default, Tags: []string{"role=prefill"},
		Meaning: "A request refused because every prefill worker was over its busy threshold: the cascade."},
	{Name: MetricClockLag, Type: metrics.Trend, Contains: metrics.Time,
		Meaning: "How far (wall ms) the run's paced clock (or, on --clock wall, the cluster's loop) ran behind the wall clock when a request ended: the host falling behind. Modeled results do not move with it (on --clock wall the offered load does); always 0 on --clock virtual."},
	{Name: MetricKVHeldBlocks, Type: metrics.Gauge, Contains: metrics.Default,
		Meaning: "Cluster-wide held blocks, sampled after every request (and on --clock wall every 50 ms while VUs wait); its max is the cluster's peak."},
}
