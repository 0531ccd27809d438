package harness

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/kvstrand/mocker/harness/options"
)

// writeBanner prints what is about to run, before any VU starts: the
// script, where samples and summaries go, and one line per scenario, so
// that a wrong -d, -u or scenario is seen at once rather than at the end.
func (t *testRun) writeBanner(w io.Writer) {
	var b strings.Builder
	if t.cfg.Version != "" {
		fmt.Fprintf(&b, "    version: %s\n", t.cfg.Version)
	}
	fmt.Fprintf(&b, "     script: %s\n", t.cfg.Script)
	fmt.Fprintf(&b, "     output: %s\n", outputsDescription(t.cfg.Outputs, t.cfg.SummaryExport))
	switch {
	case t.vclock != nil && t.vclock.Paced():
		fmt.Fprintf(&b, "      clock: paced, from %s (virtual time at the wall clock's pace: results as on --clock virtual)\n", t.vclock.epoch.Format(time.RFC3339))
	case t.vclock != nil:
		fmt.Fprintf(&b, "      clock: virtual, from %s (time moves only when every VU waits)\n", t.vclock.epoch.Format(time.RFC3339))
	case t.clockWhy != "":
		b.WriteString("      clock: wall\n")
	}
	if t.clockWhy != "" {
		fmt.Fprintf(&b, "             (chosen: %s; --clock paced, virtual or wall to choose)\n", t.clockWhy)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  scenarios: %s:\n", scenariosHeadline(t.opts.Scenarios))
	for _, sc := range t.opts.Scenarios {
		fmt.Fprintf(&b, "           * %s: %s\n", sc.Name, describeScenario(sc))
	}
	b.WriteString("\n")
	_, _ = io.WriteString(w, b.String())
}

// outputsDescription names where results go besides the summary on
// stdout; "-" when nowhere, as k6 prints it.
func outputsDescription(outputs []string, summaryExport string) string {
	var parts []string
	for _, o := range outputs {
		kind, arg, _ := strings.Cut(o, "=")
		parts = append(parts, fmt.Sprintf("%s (%s)", kind, arg))
	}
	if summaryExport != "" {
		parts = append(parts, fmt.Sprintf("summary export (%s)", summaryExport))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// scenariosHeadline sums up the scenarios: how many, the most VUs they may
// hold (each scenario keeps its own VUs, so their maxima add up) and when
// the last one is cut off at the latest.
func scenariosHeadline(scs []*options.Scenario) string {
	var vus int64
	var longest time.Duration
	for _, sc := range scs {
		vus += sc.PeakVUs()
		longest = max(longest, sc.StartTime+sc.TotalDuration()+sc.GracefulStop)
	}
	return fmt.Sprintf("%s, %s, %s max duration (incl. graceful stop)",
		plural(int64(len(scs)), "scenario"), plural(vus, "max VU"), bannerDur(longest))
}

// describeScenario is the scenario in one line, worded as k6 words it, with
// the settings that decide when it stops in parentheses.
func describeScenario(sc *options.Scenario) string {
	var what string
	var extra []string
	switch sc.Executor {
	case options.ExecSharedIterations:
		what = fmt.Sprintf("%s shared among %s", plural(sc.Iterations, "iteration"), plural(sc.VUs, "VU"))
		extra = append(extra, "maxDuration: "+bannerDur(sc.MaxDuration))
	case options.ExecPerVUIterations:
		what = fmt.Sprintf("%s for each of %s", plural(sc.Iterations, "iteration"), plural(sc.VUs, "VU"))
		extra = append(extra, "maxDuration: "+bannerDur(sc.MaxDuration))
	case options.ExecConstantVUs:
		what = fmt.Sprintf("%s for %s", plural(sc.VUs, "looping VU"), bannerDur(sc.Duration))
	case options.ExecRampingVUs:
		what = fmt.Sprintf("Up to %s for %s over %s", plural(sc.PeakVUs(), "looping VU"),
			bannerDur(sc.TotalDuration()), plural(int64(len(sc.Stages)), "stage"))
		extra = append(extra, "gracefulRampDown: "+bannerDur(sc.GracefulRampDown))
	case options.ExecConstantArrival:
		what = fmt.Sprintf("%s iterations/s for %s", perSecond(sc.Rate, sc.TimeUnit), bannerDur(sc.Duration))
		extra = append(extra, arrivalVUs(sc)...)
	case options.ExecRampingArrivalRate:
		what = fmt.Sprintf("Up to %s iterations/s for %s over %s", perSecond(max(sc.StartRate, options.MaxTarget(sc.Stages)), sc.TimeUnit),
			bannerDur(sc.TotalDuration()), plural(int64(len(sc.Stages)), "stage"))
		extra = append(extra, arrivalVUs(sc)...)
	default:
		what = sc.Executor
	}
	if sc.StartTime > 0 {
		extra = append(extra, "startTime: "+bannerDur(sc.StartTime))
	}
	extra = append(extra, "gracefulStop: "+bannerDur(sc.GracefulStop))
	if sc.Exec != "" && sc.Exec != "default" {
		extra = append(extra, "exec: "+sc.Exec)
	}
	return what + " (" + strings.Join(extra, ", ") + ")"
}

// arrivalVUs names the VU budget of an arrival-rate scenario; the
// pre-allocated count is shown only when more VUs may be added on demand.
func arrivalVUs(sc *options.Scenario) []string {
	if sc.PreAllocatedVUs == sc.MaxVUs {
		return []string{"maxVUs: " + itoa(sc.MaxVUs)}
	}
	return []string{"preAllocatedVUs: " + itoa(sc.PreAllocatedVUs), "maxVUs: " + itoa(sc.MaxVUs)}
}

// perSecond renders rate per timeUnit as iterations per second with at
// most two decimals and no trailing zeros ("10", "0.5", "0.33"); slower
// rates keep two significant digits rather than rounding to 0.
func perSecond(rate int64, unit time.Duration) string {
	r := float64(rate) / unit.Seconds()
	s := strconv.FormatFloat(r, 'f', 2, 64)
	if r > 0 && r < 0.01 {
		s = strconv.FormatFloat(r, 'g', 2, 64)
	}
	if strings.Contains(s, ".") && !strings.ContainsAny(s, "e") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// plural writes n and the noun, with an "s" unless n is 1.
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return itoa(n) + " " + noun + "s"
}

// bannerDur writes d as a script would ("1m", "1h30m", "5.6s"): Go's form
// without the zero units it appends.
func bannerDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
