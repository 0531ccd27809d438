package serve

// PromDoc describes one Prometheus metric of `mocker serve` for people
// (docs/metrics.md).
type PromDoc struct {
	Name string
	// Type is "gauge" or "counter".
	Type string
	// Meaning says what it counts.
	Meaning string
}

// TierLabels are the labels of TierMetricDocs' series: the worker rank's
// (model_name, engine, worker), the tier as Dynamo's KVBM numbers it (G2,
// G3, G4) and its medium as KV events name it (CPU, DISK, EXTERNAL), so
// that each tier is another pair of label values under the same names.
var TierLabels = tierLabels

// TierMetricDocs are the series of a worker rank with KV tiers below its
// GPU pool (num_g2_blocks), one set per tier, under every engine's names.
// The server builds the metrics from this table.
var TierMetricDocs = []PromDoc{
	{Name: "mocker_kv_tier_blocks", Type: "gauge",
		Meaning: "KV blocks the tier holds now."},
	{Name: "mocker_kv_tier_capacity_blocks", Type: "gauge",
		Meaning: "KV blocks the tier can hold (num_g2_blocks for G2, num_g3_blocks for G3; absent for G4, which has no bound)."},
	{Name: "mocker_kv_tier_offloaded_blocks_total", Type: "counter",
		Meaning: "KV blocks stored into the tier (G2: blocks the GPU pool's prefix cache evicted into it; G3 and G4: copies of the blocks G2 took in)."},
	{Name: "mocker_kv_tier_onboarded_blocks_total", Type: "counter",
		Meaning: "KV blocks copied back from the tier into the GPU pool on a prefix hit instead of recomputed."},
}
