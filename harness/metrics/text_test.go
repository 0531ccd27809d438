package metrics

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func renderFixture(t *testing.T, noColor bool) string {
	t.Helper()
	c := summaryFixture(t)
	root := map[string]any{"name": "", "groups": []any{
		map[string]any{"name": "login", "groups": []any{}, "checks": []any{
			map[string]any{"name": "token present", "passes": 3, "fails": 1},
		}},
	}, "checks": []any{
		map[string]any{"name": "status is 200", "passes": 4, "fails": 0},
	}}
	opts := SummaryOptions{TestRunDuration: 2 * time.Second, NoColor: noColor, RootGroup: root}
	var buf bytes.Buffer
	require.NoError(t, WriteTextSummary(&buf, c.SummaryData(opts), opts))
	return buf.String()
}

func TestWriteTextSummary_ThresholdLines(t *testing.T) {
	t.Parallel()
	out := renderFixture(t, true)
	t.Log("\n" + out)
	for _, want := range []string{
		"█ THRESHOLDS",
		"    checks\n    ✓ 'rate>0.5' rate=66.67%",
		"    iterations\n    ✓ 'count>=4' count=4",
		"    http_req_duration\n    ✗ 'p(95)<200' p(95)=",
		"✗ 'p(99)<300' p(99)=",
		"      {status:200}\n      ✓ 'max<100' max=40ms",
		"    unused_trend\n    ✓ 'avg<5' avg=0s",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "{scenario:b}\n      ✓", "a submetric without thresholds has no threshold lines")
	assert.Less(t, strings.Index(out, "THRESHOLDS"), strings.Index(out, "METRICS"), "thresholds come first")
	assert.NotContains(t, out, "\x1b[")
}

func TestWriteTextSummary_MetricsAndChecks(t *testing.T) {
	t.Parallel()
	out := renderFixture(t, true)
	lines := strings.Split(out, "\n")
	find := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return l
			}
		}
		t.Fatalf("no line starting with %q in\n%s", prefix, out)
		return ""
	}
	assert.Regexp(t, `^    checks\.+: 66\.67% +✓ 2 +✗ 1$`, find("checks."))
	assert.Regexp(t, `^    iterations\.+: 4 +2/s$`, find("iterations."))
	assert.Regexp(t, `^    data_sent\.+: 1\.5 kB +750 B/s$`, find("data_sent."))
	assert.Regexp(t, `^    vus\.+: 5 +min=3 +max=7$`, find("vus."))
	assert.Regexp(t, `^    http_req_duration\.+: avg=100ms +min=10ms +med=30ms +max=400ms +p\(90\)=\S+ +p\(95\)=\S+$`, find("http_req_duration."))
	assert.Regexp(t, `^      \{ status:200 \}\.+: avg=25ms `, find("{ status:200 }"))

	// The dotted labels end in the same column.
	col := -1
	for _, l := range lines {
		if i := strings.Index(l, ": "); i > 0 && strings.Contains(l[:i], "..") {
			if col < 0 {
				col = i
			}
			assert.Equal(t, col, i, l)
		}
	}
	assert.Contains(t, out, "█ CHECKS")
	assert.Contains(t, out, "    ✓ status is 200")
	assert.Contains(t, out, "    █ login\n      ✗ token present\n       ↳  75% — ✓ 3 / ✗ 1")
}

func TestWriteTextSummary_ColorsUnlessNoColor(t *testing.T) {
	t.Parallel()
	out := renderFixture(t, false)
	assert.Contains(t, out, ansiGreen+"✓"+ansiReset)
	assert.Contains(t, out, ansiRed+"✗"+ansiReset)
}

func TestWriteTextSummary_WorksAfterJSONRoundTrip(t *testing.T) {
	t.Parallel()
	c := summaryFixture(t)
	opts := SummaryOptions{TestRunDuration: 2 * time.Second, NoColor: true}
	data := c.SummaryData(opts)
	var direct bytes.Buffer
	require.NoError(t, WriteTextSummary(&direct, data, opts))
	b, err := json.Marshal(data)
	require.NoError(t, err)
	var decoded map[string]any
	require.NoError(t, json.Unmarshal(b, &decoded))
	var viaJSON bytes.Buffer
	require.NoError(t, WriteTextSummary(&viaJSON, decoded, opts))
	assert.Equal(t, direct.String(), viaJSON.String())
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ms   float64
		unit string
		want string
	}{
		{0, "", "0s"},
		{0.0005, "", "0.5µs"},
		{0.25, "", "250µs"},
		{1.234, "", "1.23ms"},
		{999, "", "999ms"},
		{999.9999999, "", "1s"},
		{0.9999999, "", "1ms"},
		{59_999.999, "", "1m0s"},
		{3_599_999.999, "", "1h0m0s"},
		{1500, "", "1.5s"},
		{59_990, "", "59.99s"},
		{90_000, "", "1m30s"},
		{125_500, "", "2m5.5s"},
		{3_723_000, "", "1h2m3s"},
		{-2, "", "-2ms"},
		{1500, "s", "1.5s"},
		{1500, "ms", "1500ms"},
		{1.5, "us", "1500µs"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, formatDuration(tt.ms, tt.unit), "%v %q", tt.ms, tt.unit)
	}
}

func TestFormatBytesAndNumbers(t *testing.T) {
	t.Parallel()
	bytesCases := map[float64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 1500: "1.5 kB", 110_000: "110 kB", 1_100_000: "1.1 MB", 2.5e9: "2.5 GB"}
	for v, want := range bytesCases {
		assert.Equal(t, want, formatBytes(v), v)
	}
	numCases := map[float64]string{0: "0", 42: "42", 9.876: "9.88", 2.5: "2.5", 0.0123456: "0.01235", -3: "-3"}
	for v, want := range numCases {
		assert.Equal(t, want, formatNumber(v), v)
	}
	assert.Equal(t, "99.50%", formatPercent(0.995))
}
