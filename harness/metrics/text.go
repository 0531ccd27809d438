package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/kvstrand/mocker/internal/jsonval"
)

const (
	ansiReset = "\x1b[0m"
	ansiGreen = "\x1b[32m"
	ansiRed   = "\x1b[31m"
	ansiCyan  = "\x1b[36m"
	ansiDim   = "\x1b[2m"
	ansiBold  = "\x1b[1m"
)

// WriteTextSummary writes k6's end-of-test text summary for data (the map
// from SummaryData, possibly after a JSON round trip): a THRESHOLDS section
// (✓/✗, the expression and the observed value, or "no samples"), the
// group/check tree when root_group has any, and the metrics with dotted
// alignment. Time values get µs/ms/s/m/h units (or opts.TimeUnit), data
// values B/kB/MB/GB. ANSI colours are used unless opts.NoColor. The runner
// may append its own sections after it.
func WriteTextSummary(w io.Writer, data map[string]any, opts SummaryOptions) error {
	p := &printer{color: !opts.NoColor, unit: opts.TimeUnit}
	if o := asMap(data["options"]); o != nil {
		if u, ok := o["summaryTimeUnit"].(string); ok && p.unit == "" {
			p.unit = u
		}
		p.stats = asStrings(o["summaryTrendStats"])
	}
	if p.stats == nil {
		p.stats = opts.TrendStats
	}
	if p.stats == nil {
		p.stats = DefaultTrendStats
	}
	metrics := asMap(data["metrics"])
	keys := sortedMetricKeys(metrics)

	p.thresholds(metrics, keys)
	p.checks(asMap(data["root_group"]))
	p.metrics(metrics, keys)
	_, err := io.WriteString(w, p.b.String())
	if err != nil {
		return fmt.Errorf("write text summary: %w", err)
	}
	return nil
}

type printer struct {
	b     strings.Builder
	color bool
	unit  string
	stats []string
}

func (p *printer) paint(code, s string) string {
	if !p.color {
		return s
	}
	return code + s + ansiReset
}

func (p *printer) mark(ok bool) string {
	if ok {
		return p.paint(ansiGreen, "✓")
	}
	return p.paint(ansiRed, "✗")
}

// sortedMetricKeys orders keys by parent metric, with each submetric right
// after its parent (plain string order would put "a_b" between "a" and
// "a{x:y}").
func sortedMetricKeys(metrics map[string]any) []string {
	keys := make([]string, 0, len(metrics))
	for k := range metrics {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		pi, pj := parentName(keys[i]), parentName(keys[j])
		if pi != pj {
			return pi < pj
		}
		return keys[i] < keys[j]
	})
	return keys
}

func parentName(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		return key[:i]
	}
	return key
}

func (p *printer) thresholds(metrics map[string]any, keys []string) {
	var lines []string
	lastParent := ""
	for _, k := range keys {
		m := asMap(metrics[k])
		th := asMap(m["thresholds"])
		if len(th) == 0 {
			continue
		}
		parent := parentName(k)
		indent := "    "
		if parent != k {
			if parent != lastParent {
				lines = append(lines, "", indent+parent)
			}
			indent += "  "
			lines = append(lines, "", indent+k[len(parent):])
		} else {
			lines = append(lines, "", indent+k)
		}
		lastParent = parent
		srcs := make([]string, 0, len(th))
		for s := range th {
			srcs = append(srcs, s)
		}
		sort.Strings(srcs)
		typ, _ := m["type"].(string)
		contains, _ := m["contains"].(string)
		for _, src := range srcs {
			r := asMap(th[src])
			ok, _ := r["ok"].(bool)
			observed := "observed value missing"
			if ns, _ := r["noSamples"].(bool); ns {
				observed = p.paint(ansiDim, "no samples")
			} else if v, has := jsonval.AsFloat(r["observed"]); has {
				observed = p.thresholdValue(src, typ, contains, v)
			}
			lines = append(lines, fmt.Sprintf("%s%s '%s' %s", indent, p.mark(ok), src, observed))
		}
	}
	if len(lines) == 0 {
		return
	}
	p.header("THRESHOLDS")
	for _, l := range lines {
		p.b.WriteString(l)
		p.b.WriteByte('\n')
	}
	p.b.WriteByte('\n')
}

func (p *printer) header(title string) {
	p.b.WriteString("\n  " + p.paint(ansiBold, "█ "+title) + "\n")
}

// thresholdValue renders "agg=value" in the units the metric's summary line
// uses for that aggregation.
func (p *printer) thresholdValue(src, typ, contains string, v float64) string {
	e, err := ParseThresholdExpr(src)
	if err != nil {
		return p.paint(ansiCyan, formatNumber(v))
	}
	var s string
	switch {
	case e.Method == AggRate && typ == "rate":
		s = formatPercent(v)
	case e.Method == AggRate:
		s = p.formatValue(contains, v) + "/s"
	case e.Method == AggCount && typ == "trend":
		s = formatNumber(v)
	default:
		s = p.formatValue(contains, v)
	}
	return e.Aggregation() + "=" + p.paint(ansiCyan, s)
}

func (p *printer) checks(root map[string]any) {
	if root == nil {
		return
	}
	var b strings.Builder
	p.group(&b, root, "    ", true)
	if b.Len() == 0 {
		return
	}
	p.header("CHECKS")
	p.b.WriteByte('\n')
	p.b.WriteString(b.String())
	p.b.WriteByte('\n')
}

func (p *printer) group(b *strings.Builder, g map[string]any, indent string, root bool) {
	if !root {
		name, _ := g["name"].(string)
		fmt.Fprintf(b, "\n%s█ %s\n", indent, name)
		indent += "  "
	}
	for _, c := range asSlice(g["checks"]) {
		cm := asMap(c)
		name, _ := cm["name"].(string)
		passes, _ := jsonval.AsFloat(cm["passes"])
		fails, _ := jsonval.AsFloat(cm["fails"])
		if fails == 0 {
			fmt.Fprintf(b, "%s%s %s\n", indent, p.mark(true), name)
			continue
		}
		fmt.Fprintf(b, "%s%s %s\n", indent, p.mark(false), name)
		pct := 0.0
		if passes+fails > 0 {
			pct = passes / (passes + fails) * 100
		}
		fmt.Fprintf(b, "%s ↳  %s%% — %s %s / %s %s\n", indent, strconv.FormatFloat(pct, 'f', 0, 64),
			p.mark(true), formatNumber(passes), p.mark(false), formatNumber(fails))
	}
	for _, sub := range asSlice(g["groups"]) {
		if sm := asMap(sub); sm != nil {
			p.group(b, sm, indent, false)
		}
	}
}

func (p *printer) metrics(metrics map[string]any, keys []string) {
	if len(keys) == 0 {
		return
	}
	type row struct {
		label  string
		fields []string
		trend  bool
	}
	rows := make([]row, 0, len(keys))
	for _, k := range keys {
		m := asMap(metrics[k])
		label := k
		if parent := parentName(k); parent != k {
			label = "  { " + k[len(parent)+1:len(k)-1] + " }"
		}
		typ, _ := m["type"].(string)
		contains, _ := m["contains"].(string)
		vals := asMap(m["values"])
		num := func(name string) float64 { v, _ := jsonval.AsFloat(vals[name]); return v }
		var fields []string
		switch typ {
		case "counter":
			fields = []string{p.formatValue(contains, num("count")), p.formatValue(contains, num("rate")) + "/s"}
		case "gauge":
			fields = []string{p.formatValue(contains, num("value")),
				"min=" + p.formatValue(contains, num("min")), "max=" + p.formatValue(contains, num("max"))}
		case "rate":
			fields = []string{formatPercent(num("rate")),
				p.mark(true) + " " + formatNumber(num("passes")), p.mark(false) + " " + formatNumber(num("fails"))}
		case "trend":
			for _, st := range p.stats {
				v, ok := jsonval.AsFloat(vals[st])
				if !ok {
					continue
				}
				s := p.formatValue(contains, v)
				if st == "count" {
					s = formatNumber(v)
				}
				fields = append(fields, st+"="+s)
			}
		}
		rows = append(rows, row{label: label, fields: fields, trend: typ == "trend"})
	}
	labelW := 0
	var widths, trendWidths []int
	for _, r := range rows {
		labelW = max(labelW, displayWidth(r.label))
		ws := &widths
		if r.trend {
			ws = &trendWidths
		}
		for i, f := range r.fields {
			if i >= len(*ws) {
				*ws = append(*ws, 0)
			}
			(*ws)[i] = max((*ws)[i], displayWidth(f))
		}
	}
	labelW += 3
	p.header("METRICS")
	p.b.WriteByte('\n')
	for _, r := range rows {
		ws := widths
		if r.trend {
			ws = trendWidths
		}
		p.b.WriteString("    " + r.label + p.paint(ansiDim, strings.Repeat(".", labelW-displayWidth(r.label))) + ": ")
		for i, f := range r.fields {
			out := p.paint(ansiCyan, f)
			if i < len(r.fields)-1 {
				out += strings.Repeat(" ", ws[i]-displayWidth(f)+1)
			}
			p.b.WriteString(out)
		}
		p.b.WriteByte('\n')
	}
	p.b.WriteByte('\n')
}

// displayWidth counts runes, ignoring ANSI escape sequences, so columns line
// up with and without colour.
func displayWidth(s string) int {
	n, esc := 0, false
	for _, r := range s {
		switch {
		case esc:
			if r == 'm' {
				esc = false
			}
		case r == '\x1b':
			esc = true
		default:
			n++
		}
	}
	return n
}

func (p *printer) formatValue(contains string, v float64) string {
	switch contains {
	case "time":
		return formatDuration(v, p.unit)
	case "data":
		return formatBytes(v)
	}
	return formatNumber(v)
}

// formatNumber prints integers exactly and other values with two decimals
// (more significant digits below 1), trimming trailing zeros.
func formatNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	if math.Abs(v) >= 1 {
		return trimZeros(strconv.FormatFloat(v, 'f', 2, 64))
	}
	return trimZeros(strconv.FormatFloat(v, 'g', 4, 64))
}

func trimZeros(s string) string {
	if !strings.Contains(s, ".") || strings.ContainsAny(s, "eE") {
		return s
	}
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func formatPercent(r float64) string {
	return strconv.FormatFloat(r*100, 'f', 2, 64) + "%"
}

// formatDuration renders a value in milliseconds. With unit "s", "ms" or
// "us" every value uses that unit; otherwise the unit follows the size.
func formatDuration(ms float64, unit string) string {
	switch unit {
	case "s":
		return trimZeros(strconv.FormatFloat(ms/1000, 'f', 2, 64)) + "s"
	case "ms":
		return trimZeros(strconv.FormatFloat(ms, 'f', 2, 64)) + "ms"
	case "us":
		return trimZeros(strconv.FormatFloat(ms*1000, 'f', 2, 64)) + "µs"
	}
	if ms == 0 {
		return "0s"
	}
	sign := ""
	if ms < 0 {
		sign, ms = "-", -ms
	}
	two := func(v float64) string { return trimZeros(strconv.FormatFloat(v, 'f', 2, 64)) }
	// The unit is chosen on the value as printed (two decimals), so
	// 999.999999 ms reads "1s", not "1000ms".
	r2 := func(v float64) float64 { return math.Round(v*100) / 100 }
	switch {
	case r2(ms*1000) < 1000:
		return sign + two(ms*1000) + "µs"
	case r2(ms) < 1000:
		return sign + two(ms) + "ms"
	case r2(ms/1000) < 60:
		return sign + two(ms/1000) + "s"
	case math.Round(ms/10) < 360_000:
		cs := math.Round(ms / 10) // hundredths of a second, as printed
		m := math.Floor(cs / 6000)
		return sign + fmt.Sprintf("%.0fm", m) + two((cs-m*6000)/100) + "s"
	}
	ts := math.Round(ms / 1000) // whole seconds, as printed
	h := math.Floor(ts / 3600)
	m := math.Floor((ts - h*3600) / 60)
	return sign + fmt.Sprintf("%.0fh%.0fm%.0fs", h, m, ts-h*3600-m*60)
}

// formatBytes uses decimal units as k6 does (1 kB = 1000 B).
func formatBytes(b float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB", "PB"}
	sign := ""
	if b < 0 {
		sign, b = "-", -b
	}
	i := 0
	for b >= 1000 && i < len(units)-1 {
		b /= 1000
		i++
	}
	prec := 0
	if i > 0 && b < 10 {
		prec = 1
	}
	return sign + strconv.FormatFloat(b, 'f', prec, 64) + " " + units[i]
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asSlice(v any) []any {
	switch s := v.(type) {
	case []any:
		return s
	case []map[string]any:
		out := make([]any, len(s))
		for i := range s {
			out[i] = s[i]
		}
		return out
	}
	return nil
}

func asStrings(v any) []string {
	switch s := v.(type) {
	case []string:
		return s
	case []any:
		out := make([]string, 0, len(s))
		for _, x := range s {
			if str, ok := x.(string); ok {
				out = append(out, str)
			}
		}
		return out
	}
	return nil
}
