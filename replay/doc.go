// Package replay reads request traces (Mooncake JSONL with hash ids,
// multi-turn sessions, plain CSV or JSONL of arrival, input and output
// lengths; gzip or not) and plays them through a cluster on virtual time
// (cluster.RunStream), in memory that follows the requests in flight, not
// the trace's length. The figures come out as a Summary in the manner of
// aiperf's report: TTFT, ITL, TPOT and E2E, throughput, goodput against an
// SLO, the prefix-cache hit rate and the KV-handoff figures. The same
// trace, config and options give the same Summary, byte for byte.
//
// The formats and a worked example are in docs/replay.md.
package replay
