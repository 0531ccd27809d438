package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness/metrics"
)

// SLO bounds a request's latencies, in modeled ms, for goodput: a
// completed request within every bound given is good. Zero fields do not
// bound.
type SLO struct {
	TTFTMs float64 `json:"ttft_ms,omitempty"`
	ITLMs  float64 `json:"itl_ms,omitempty"`
	E2EMs  float64 `json:"e2e_ms,omitempty"`
}

// ParseSLO reads "ttft=200,itl=20,e2e=5000" (ms; any subset).
func ParseSLO(s string) (SLO, error) {
	var slo SLO
	if strings.TrimSpace(s) == "" {
		return slo, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "ms"), 64)
		if !ok || err != nil || !(f > 0) {
			return SLO{}, fmt.Errorf("--slo %q: want key=ms pairs with ms > 0, e.g. ttft=200,itl=20,e2e=5000", kv)
		}
		bound, known := map[string]*float64{"ttft": &slo.TTFTMs, "itl": &slo.ITLMs, "e2e": &slo.E2EMs}[strings.TrimSpace(k)]
		if !known {
			return SLO{}, fmt.Errorf("--slo %q: unknown key %q; want ttft, itl or e2e", kv, k)
		}
		*bound = f
	}
	return slo, nil
}

func (s SLO) given() bool { return s.TTFTMs > 0 || s.ITLMs > 0 || s.E2EMs > 0 }

func (s SLO) meets(r cluster.Result) bool {
	return (s.TTFTMs == 0 || r.TTFTMs <= s.TTFTMs) && (s.ITLMs == 0 || r.ITLMs <= s.ITLMs) && (s.E2EMs == 0 || r.E2EMs <= s.E2EMs)
}

// Figures accumulates the results of a replay in memory bounded by the
// number of workers and outcomes, not by the requests.
type Figures struct {
	slo                  SLO
	ended                uint64
	TTFT, ITL, TPOT, E2E metrics.Histogram
	// Holds are hold durations by outcome ("aborted", "transferred").
	Holds                   map[string]*metrics.Histogram
	completed, good         uint64
	input, output           uint64 // tokens of completed requests
	prefilled, cached       uint64 // prompt tokens of prefilled requests, and those found cached
	aborted, rejected, errs uint64
	// Routed counts requests by the worker (and rank) that served them.
	Routed map[[2]string]uint64
}

func newFigures(slo SLO) *Figures {
	return &Figures{slo: slo, Holds: map[string]*metrics.Histogram{}, Routed: map[[2]string]uint64{}}
}

func (f *Figures) add(input int, r cluster.Result) {
	f.ended++
	if r.OutputTokens > 0 {
		f.prefilled += uint64(input)
		f.cached += uint64(r.CachedTokens)
	}
	if r.HoldOutcome != "" {
		h := f.Holds[r.HoldOutcome]
		if h == nil {
			h = new(metrics.Histogram)
			f.Holds[r.HoldOutcome] = h
		}
		h.Add(r.HoldMs)
	}
	if r.PrefillWorker != "" {
		f.Routed[[2]string{r.PrefillWorker, strconv.Itoa(r.PrefillDPRank)}]++
	}
	if r.DecodeWorker != "" && r.DecodeWorker != r.PrefillWorker {
		f.Routed[[2]string{r.DecodeWorker, strconv.Itoa(r.DecodeDPRank)}]++
	}
	switch r.Outcome {
	case cluster.OutcomeCompleted:
	case cluster.OutcomeAborted:
		f.aborted++
		return
	case cluster.OutcomeRejected:
		f.rejected++
		return
	default:
		f.errs++
		return
	}
	f.completed++
	f.input += uint64(input)
	f.output += uint64(r.OutputTokens)
	f.TTFT.Add(r.TTFTMs)
	f.E2E.Add(r.E2EMs)
	if r.OutputTokens > 1 {
		f.ITL.Add(r.ITLMs)
		f.TPOT.Add((r.E2EMs - r.TTFTMs) / float64(r.OutputTokens-1))
	}
	if f.slo.given() && f.slo.meets(r) {
		f.good++
	}
}

// Distribution summarises one latency over the completed requests, in
// modeled ms.
type Distribution struct {
	Count uint64  `json:"count"`
	Avg   float64 `json:"avg"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
}

func distribution(h *metrics.Histogram) Distribution {
	if h.Count() == 0 {
		return Distribution{}
	}
	return Distribution{Count: h.Count(), Avg: h.Avg(), Min: h.Min(), Max: h.Max(),
		P50: h.Percentile(50), P90: h.Percentile(90), P99: h.Percentile(99)}
}

// Summary is every figure of a replay. Times are modeled ms, throughputs
// per modeled second.
type Summary struct {
	// Requests counts the requests sent; each ended as one of Completed,
	// Aborted (its KV handoff gave up), Rejected or Errored.
	Requests  uint64 `json:"requests"`
	Completed uint64 `json:"completed"`
	Aborted   uint64 `json:"aborted"`
	Rejected  uint64 `json:"rejected"`
	Errored   uint64 `json:"errored"`
	// Sessions counts the sessions seen; LateTurns the turns the trace
	// listed only after the turn before had ended, sent as they were read.
	Sessions  int    `json:"sessions"`
	LateTurns uint64 `json:"late_turns"`
	// InputTokens and OutputTokens sum the completed requests' prompts and
	// outputs.
	InputTokens  uint64 `json:"input_tokens"`
	OutputTokens uint64 `json:"output_tokens"`
	// DurationMs runs from the first arrival to the last request's end.
	DurationMs float64 `json:"duration_ms"`
	// TTFT, ITL (the mean gap between a request's output tokens after the
	// first), TPOT ((E2E − TTFT) / (output tokens − 1), as vLLM's
	// benchmark reports it) and E2E over the completed requests; ITL and
	// TPOT over those with two tokens or more.
	TTFT Distribution `json:"ttft_ms"`
	ITL  Distribution `json:"itl_ms"`
	TPOT Distribution `json:"tpot_ms"`
	E2E  Distribution `json:"e2e_ms"`
	// RequestThroughput is completed requests per second; the token
	// throughputs are the completed requests' tokens per second.
	RequestThroughput     float64 `json:"request_throughput"`
	InputTokenThroughput  float64 `json:"input_token_throughput"`
	OutputTokenThroughput float64 `json:"output_token_throughput"`
	// SLO is the bound goodput counts against; GoodRequests the completed
	// requests within it and Goodput those per second (0 without an SLO).
	SLO          SLO     `json:"slo"`
	GoodRequests uint64  `json:"good_requests"`
	Goodput      float64 `json:"goodput"`
	// PrefixCacheHitRate is the prompt tokens found in the prefill
	// worker's cache over the prompt tokens of every request prefilled.
	PrefixCacheHitRate float64 `json:"prefix_cache_hit_rate"`
	CachedTokens       uint64  `json:"cached_tokens"`
	PrefilledTokens    uint64  `json:"prefilled_tokens"`
	// KV are the handoff figures.
	KV KVFigures `json:"kv"`
	// Cluster is the cluster's counters and occupancy at the end.
	Cluster cluster.Stats `json:"cluster"`
}

// KVFigures are a replay's KV-handoff figures.
type KVFigures struct {
	// Holds counts prefill KV holds; Transferred, Aborted and Cancelled
	// how they ended.
	Holds       uint64 `json:"holds"`
	Transferred uint64 `json:"transferred"`
	Aborted     uint64 `json:"aborted"`
	Cancelled   uint64 `json:"cancelled"`
	// HoldMsMean and HoldMsMax describe the ended holds' durations.
	HoldMsMean float64 `json:"hold_ms_mean"`
	HoldMsMax  float64 `json:"hold_ms_max"`
	// PeakHeldBlocks is the most blocks held across the cluster at once.
	PeakHeldBlocks int `json:"peak_held_blocks"`
	// PrefillRefusals counts requests refused because every prefill
	// worker was busy.
	PrefillRefusals uint64 `json:"prefill_refusals"`
}

func (f *Figures) summary(st cluster.Stats, firstAt float64, sessions int, late uint64) Summary {
	s := Summary{
		Requests: f.ended, Completed: f.completed, Aborted: f.aborted, Rejected: f.rejected, Errored: f.errs,
		Sessions: sessions, LateTurns: late, InputTokens: f.input, OutputTokens: f.output,
		TTFT: distribution(&f.TTFT), ITL: distribution(&f.ITL), TPOT: distribution(&f.TPOT), E2E: distribution(&f.E2E),
		SLO: f.slo, GoodRequests: f.good, CachedTokens: f.cached, PrefilledTokens: f.prefilled, Cluster: st,
	}
	if f.ended > 0 {
		s.DurationMs = st.NowMs - firstAt
	}
	if sec := s.DurationMs / 1000; sec > 0 {
		s.RequestThroughput = float64(f.completed) / sec
		s.InputTokenThroughput = float64(f.input) / sec
		s.OutputTokenThroughput = float64(f.output) / sec
		s.Goodput = float64(f.good) / sec
	}
	if f.prefilled > 0 {
		s.PrefixCacheHitRate = float64(f.cached) / float64(f.prefilled)
	}
	ended := st.HoldsReleased + st.HoldsAborted + st.HoldsCancelled
	s.KV = KVFigures{Holds: st.Holds, Transferred: st.HoldsReleased, Aborted: st.HoldsAborted, Cancelled: st.HoldsCancelled,
		HoldMsMax: st.HoldMsMax, PeakHeldBlocks: st.PeakHeldBlocks, PrefillRefusals: st.PrefillRejections}
	if ended > 0 {
		s.KV.HoldMsMean = st.HoldMsTotal / float64(ended)
	}
	return s
}

// WriteJSON writes s as indented JSON: the same replay gives the same
// bytes.
func (s Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// WriteTable writes s as a table in the manner of aiperf's console report.
func (s Summary) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %10s %10s %10s %10s %10s %10s\n", "Metric (modeled ms)", "avg", "min", "max", "p50", "p90", "p99")
	for _, row := range []struct {
		name string
		d    Distribution
	}{{"Time to first token", s.TTFT}, {"Inter-token latency", s.ITL}, {"Time per output token", s.TPOT}, {"Request latency (E2E)", s.E2E}} {
		d := row.d
		fmt.Fprintf(&b, "%-28s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", row.name, d.Avg, d.Min, d.Max, d.P50, d.P90, d.P99)
	}
	b.WriteString("\n")
	line := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "%-34s "+format+"\n", append([]any{name}, args...)...)
	}
	line("Requests", "%d sent: %d completed, %d aborted, %d rejected, %d errored", s.Requests, s.Completed, s.Aborted, s.Rejected, s.Errored)
	if s.Sessions > 0 {
		line("Sessions", "%d (%d turns sent late)", s.Sessions, s.LateTurns)
	}
	line("Modeled duration (s)", "%.3f", s.DurationMs/1000)
	line("Request throughput (req/s)", "%.2f", s.RequestThroughput)
	line("Input token throughput (tok/s)", "%.1f", s.InputTokenThroughput)
	line("Output token throughput (tok/s)", "%.1f", s.OutputTokenThroughput)
	if s.SLO.given() {
		line("Goodput (req/s)", "%.2f (%d of %d requests within %s)", s.Goodput, s.GoodRequests, s.Requests, s.SLO)
	}
	line("Prefix cache hit rate", "%.2f%% (%d of %d prompt tokens)", 100*s.PrefixCacheHitRate, s.CachedTokens, s.PrefilledTokens)
	k := s.KV
	line("KV holds", "%d: %d transferred, %d aborted, %d cancelled", k.Holds, k.Transferred, k.Aborted, k.Cancelled)
	line("KV hold duration (ms)", "mean %.2f, max %.2f", k.HoldMsMean, k.HoldMsMax)
	line("Peak held blocks", "%d", k.PeakHeldBlocks)
	line("Prefill refusals", "%d", k.PrefillRefusals)
	_, err := io.WriteString(w, b.String())
	return err
}

func (s SLO) String() string {
	var parts []string
	for _, p := range []struct {
		k string
		v float64
	}{{"ttft", s.TTFTMs}, {"itl", s.ITLMs}, {"e2e", s.E2EMs}} {
		if p.v > 0 {
			parts = append(parts, p.k+"≤"+strconv.FormatFloat(p.v, 'g', -1, 64)+"ms")
		}
	}
	return strings.Join(parts, ", ")
}
