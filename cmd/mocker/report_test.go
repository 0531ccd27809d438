package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// updateScreenshot rewrites docs/report.png from TestReport_CascadeInHeadlessChromium:
//
//	go test ./cmd/mocker -run TestReport_CascadeInHeadlessChromium -update-screenshot
var updateScreenshot = flag.Bool("update-screenshot", false, "write the report's screenshot to docs/report.png")

// chromiumPath finds headless Chromium. Without it the browser test is
// skipped on a developer's machine, and fails under CI=true, where it must
// run.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "headless Chromium is needed to check the HTML report: install it (Debian: apt-get install -y chromium; .ci/run does)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// runCascade runs scripts/cascade.js briefly with --report and
// --summary-export and returns the report's path and the summary data.
func runCascade(t *testing.T, dir string) (string, map[string]any) {
	t.Helper()
	html := filepath.Join(dir, "report.html")
	export := filepath.Join(dir, "summary.json")
	code, stdout, stderr := runArgs("-q", "--no-color", "--include-system-env-vars=false",
		"--report", html, "--summary-export", export,
		"-e", "DURATION=3s", "-e", "VUS=16", filepath.Join("..", "..", "scripts", "cascade.js"))
	// 99 (a threshold of the cascade's crossed) still has a report to check
	require.Contains(t, []int{0, 99}, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	b, err := os.ReadFile(export)
	require.NoError(t, err)
	var summary map[string]any
	require.NoError(t, json.Unmarshal(b, &summary))
	return html, summary
}

// exportedThresholds lists the thresholds of a --summary-export file as
// "metric source ok", where the file maps each to true when it FAILED.
func exportedThresholds(t *testing.T, summary map[string]any) []string {
	t.Helper()
	var out []string
	for name, m := range summary["metrics"].(map[string]any) {
		ths, _ := m.(map[string]any)["thresholds"].(map[string]any)
		for src, failed := range ths {
			out = append(out, fmt.Sprintf("%s %s %t", name, src, !failed.(bool)))
		}
	}
	require.Len(t, out, 7, "cascade.js has seven thresholds")
	return out
}

// chartInfo is what the page says of one chart.
type chartInfo struct {
	Kind   string `json:"kind"`
	Points int    `json:"points"`
	// Drawn counts the SVG paths and rects with a visible area or length.
	Drawn int `json:"drawn"`
}

// TestReport_CascadeInHeadlessChromium renders the report of a short
// cascade run in headless Chromium and checks that it is self-contained
// (no request but the file itself, no console error), that every chart
// drew something, and that the held-blocks chart's peak is the run's.
func TestReport_CascadeInHeadlessChromium(t *testing.T) {
	chromium := chromiumPath(t)
	dir := t.TempDir()
	html, summary := runCascade(t, dir)
	peak := summary["mocker"].(map[string]any)["clusters"].(map[string]any)["cascade"].(map[string]any)["peak_held_blocks"].(float64)
	require.Positive(t, peak, "the cascade pinned KV")

	fi, err := os.Stat(html)
	require.NoError(t, err)
	t.Logf("report: %d bytes", fi.Size())
	assert.Less(t, fi.Size(), int64(2<<20), "the report stays under 2 MB")

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1400, 1000))
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(alloc)
	defer cancelCtx()
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute) // a hung browser fails, nothing is timed
	defer cancelTimeout()

	var (
		mu       sync.Mutex
		requests []string
		problems []string
	)
	_, err = chromedp.Call(ctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	_, err = chromedp.Call(ctx, log.Enable, struct{}{})
	require.NoError(t, err)
	_, err = chromedp.Call(ctx, runtime.Enable, struct{}{})
	require.NoError(t, err)
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, ev.Request.URL)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				problems = append(problems, "console."+string(ev.Type))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+ev.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				problems = append(problems, fmt.Sprintf("browser log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	}))

	page := (&url.URL{Scheme: "file", Path: html}).String()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(page)))

	charts, err := chromedp.Run(ctx, chromedp.Evaluate[[]chartInfo](`[...document.querySelectorAll('figure.chart')].map(f => ({
  kind: f.dataset.chart,
  points: Number(f.dataset.points),
  drawn: [...f.querySelectorAll('svg path, svg rect')].filter(e => {
    const b = e.getBBox();
    return (e.getAttribute('d') || e.tagName === 'rect') && (b.width > 0 || b.height > 0);
  }).length,
}))`))
	require.NoError(t, err)
	kinds := make([]string, 0, len(charts))
	for _, c := range charts {
		kinds = append(kinds, c.Kind)
		assert.Positivef(t, c.Points, "chart %q plotted no data", c.Kind)
		// axes, ticks and grid alone draw a couple of dozen paths; data
		// adds one path per line, glyph or bar
		assert.Greaterf(t, c.Drawn, 20, "chart %q drew almost nothing", c.Kind)
	}
	assert.ElementsMatch(t, []string{"held", "blocks", "queue", "reserved", "outcomes", "ttft", "pin", "timeline", "routed"}, kinds)

	attr, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('figure[data-chart="held"]').dataset.peakHeldBlocks`))
	require.NoError(t, err)
	label, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('figure[data-chart="held"] .peak-value').textContent`))
	require.NoError(t, err)
	for _, got := range []string{attr, label} {
		n, err := strconv.Atoi(strings.TrimSpace(got))
		require.NoError(t, err)
		assert.Equal(t, int(peak), n, "the held-blocks chart's peak is the run's peak_held_blocks")
	}

	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('table.thresholds tr[data-ok]')].map(r =>
  r.querySelectorAll('code')[0].textContent + ' ' + r.querySelectorAll('code')[1].textContent + ' ' + r.dataset.ok)`))
	require.NoError(t, err)
	assert.ElementsMatch(t, exportedThresholds(t, summary), rows, "every threshold, passed or failed as the summary says")

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	shot := filepath.Join(t.ArtifactDir(), "report.png")
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	t.Logf("screenshot: %s", shot)
	if *updateScreenshot {
		require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "report.png"), png, 0o644))
	}

	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, problems, "console errors")
	require.NotEmpty(t, requests, "the page itself was loaded")
	for _, r := range requests {
		assert.Equal(t, page, r, "a request left the page")
	}
}

// cancelOn is a stderr that cancels the run once a line contains s.
type cancelOn struct {
	mu     sync.Mutex
	b      strings.Builder
	s      string
	cancel context.CancelCauseFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if strings.Contains(w.b.String(), w.s) {
		w.cancel(errors.New("test run was aborted because mocker received a 'interrupt' signal"))
	}
	return len(p), nil
}

func (w *cancelOn) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestRun_ReportIsWrittenOnInterrupt(t *testing.T) {
	t.Parallel()
	html := filepath.Join(t.TempDir(), "report.html")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stderr := &cancelOn{s: "three requests in", cancel: cancel}
	var stdout strings.Builder
	code := runWith(ctx, []string{"-q", "--report", html, filepath.Join("testdata", "interrupted.js")}, &stdout, stderr, false, false, 0)
	require.Equal(t, 105, code, "interrupted; stderr:\n%s", stderr)
	b, err := os.ReadFile(html)
	require.NoError(t, err, "the report is written on interrupt too")
	page := string(b)
	assert.Contains(t, page, `data-cluster="interrupted"`)
	assert.Contains(t, page, `data-chart="held"`)
	assert.Contains(t, stdout.String(), "KV HANDOFF", "and the summary as ever")
}

func TestRun_ReportPathIsCheckedBeforeTheRun(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "no-such-dir", "report.html")
	code, stdout, stderr := runArgs("-q", "--report", bad, filepath.Join("testdata", "interrupted.js"))
	assert.Equal(t, 104, code)
	assert.Empty(t, stdout, "nothing ran")
	assert.Contains(t, stderr, "--report "+bad+": the file cannot be written")
}

func TestRun_ReportNeedsTheMockerModule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "plain.js")
	require.NoError(t, os.WriteFile(script, []byte("export const options = { iterations: 1 };\nexport default function () {}\n"), 0o644))
	html := filepath.Join(dir, "report.html")
	code, _, stderr := runArgs("-q", "--report", html, script)
	assert.Equal(t, 0, code, "the run itself is fine")
	assert.Contains(t, stderr, "no report written")
	assert.NoFileExists(t, html)
}
