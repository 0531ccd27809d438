package xk6mocker

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kvstrand/mocker/cluster"
)

// longestShown is how many of the longest holds the summary lists.
const longestShown = 5

// writeSummary is the run's summary section: one "KV handoff" block per
// cluster the run used, nothing when it used none.
func (r *run) writeSummary(w io.Writer) {
	r.mu.Lock()
	list := r.sortedEntries()
	r.mu.Unlock()
	for _, e := range list {
		writeEntrySummary(w, e)
	}
}

func writeEntrySummary(w io.Writer, e *entry) {
	st := e.stats()
	var b strings.Builder
	fmt.Fprintf(&b, "\n  █ KV HANDOFF  cluster %q: %s, router %s, %s\n\n", e.name, e.engine, e.router, e.topology)
	line := func(label, value string) {
		fmt.Fprintf(&b, "    %s%s: %s\n", label, strings.Repeat(".", max(2, 22-len([]rune(label)))), value)
	}
	line("requests", fmt.Sprintf("%d (completed %d, aborted %d, rejected %d, error %d)",
		st.Requests, st.Completed, st.Aborted, st.Rejected, st.Errored))
	ended := st.Completed + st.Aborted + st.Rejected + st.Errored
	if rec := e.recorded.Load(); ended > rec {
		line("outside iterations", fmt.Sprintf("%d requests ended after their VU was interrupted (e.g. by gracefulStop): not in the mocker_* metrics", ended-rec))
	}
	line("holds started", fmt.Sprint(st.Pins))
	line("released", fmt.Sprintf("%d (transferred)", st.PinsReleased))
	line("aborted", fmt.Sprint(st.PinsAborted))
	if open := int64(st.Pins) - int64(st.PinsReleased) - int64(st.PinsAborted); open > 0 {
		line("still held", fmt.Sprint(open))
	}
	if n, avg, p50, p90, p99, mx := e.pinSummary(); n > 0 {
		line("hold duration", fmt.Sprintf("avg=%s p(50)=%s p(90)=%s p(99)=%s max=%s",
			ms(avg), ms(p50), ms(p90), ms(p99), ms(mx)))
	}
	line("peak held blocks", fmt.Sprint(st.PeakHeldBlocks))
	line("prefill refusals", fmt.Sprint(st.PrefillRejections))
	if longest := longestHolds(e.holds(), longestShown); len(longest) > 0 {
		b.WriteString("\n    longest holds (prefill → decode)\n")
		for _, h := range longest {
			outcome := h.Outcome
			if outcome == "" {
				outcome = "held"
			}
			fmt.Fprintf(&b, "      %-12s → %-12s %10s  %-11s transfer %d\n",
				h.PrefillWorker, orDash(h.DecodeWorker), ms(h.DurationMs), outcome, h.TransferID)
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// longestHolds returns the n longest ended holds, longest first.
func longestHolds(hs []cluster.Hold, n int) []cluster.Hold {
	ended := make([]cluster.Hold, 0, len(hs))
	for _, h := range hs {
		if h.Outcome != "" {
			ended = append(ended, h)
		}
	}
	sort.SliceStable(ended, func(i, j int) bool {
		if ended[i].DurationMs != ended[j].DurationMs {
			return ended[i].DurationMs > ended[j].DurationMs
		}
		return ended[i].TransferID < ended[j].TransferID
	})
	if len(ended) > n {
		ended = ended[:n]
	}
	return ended
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ms formats modeled milliseconds the way the text summary formats times.
func ms(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v >= 1:
		return fmt.Sprintf("%.2fms", v)
	default:
		return fmt.Sprintf("%.0fµs", v*1000)
	}
}
