package report

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/internal/timescale"
)

// chart is one inlined SVG figure.
type chart struct {
	// Kind names the chart for tests and styling: data-chart="held", …
	Kind    string
	Title   string
	Caption string
	SVG     template.HTML
	// Points counts the data points drawn (data-points), so a chart that
	// drew nothing can be told apart from one that did.
	Points int
	// PeakHeld is set on the held-blocks chart (data-peak-held-blocks).
	PeakHeld *int
}

const (
	chartWidth  = 16 * vg.Centimeter
	chartHeight = 7 * vg.Centimeter
)

// Outcome colours, the same in every chart.
var (
	colCompleted = color.RGBA{R: 0x2e, G: 0x7d, B: 0x32, A: 0xff}
	colAborted   = color.RGBA{R: 0xc6, G: 0x28, B: 0x28, A: 0xff}
	colRejected  = color.RGBA{R: 0xef, G: 0x6c, B: 0x00, A: 0xff}
	colOpen      = color.RGBA{R: 0x75, G: 0x75, B: 0x75, A: 0xff}
	colTotal     = color.RGBA{A: 0xff}
)

func outcomeColor(outcome string) color.Color {
	switch outcome {
	case cluster.OutcomeCompleted, "transferred":
		return colCompleted
	case cluster.OutcomeAborted:
		return colAborted
	case cluster.OutcomeRejected, "cancelled":
		return colRejected
	}
	return colOpen
}

func newPlot(title, yLabel string) *plot.Plot {
	p := plot.New()
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		f.Variant = "Sans"
	}
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.X.Tick.Label.Font.Size = vg.Points(9)
	p.Y.Tick.Label.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())
	return p
}

// timeAxis makes p's x axis modeled seconds, each tick with its script
// time (modeled time / speedup_ratio: the run's clock, which a paced run
// keeps with the wall clock and a virtual one does not).
func timeAxis(p *plot.Plot, speedup float64) {
	p.X.Label.Text = "modeled time (script time below)"
	p.X.Tick.Marker = timeTicks{speedup: speedup}
}

// timeTicks labels modeled seconds with the script seconds they took.
type timeTicks struct{ speedup float64 }

func (t timeTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label == "" {
			continue
		}
		v := ticks[i].Value
		ticks[i].Label = seconds(v)
		if t.speedup > 0 {
			ticks[i].Label += "\n" + seconds(scriptSeconds(v, t.speedup)) + " script"
		}
	}
	return ticks
}

// scriptSeconds is the script time, in seconds, that modeled seconds v
// took at speedup_ratio speedup.
func scriptSeconds(v, speedup float64) float64 {
	return timescale.New(speedup).Script(v * 1000).Seconds()
}

func seconds(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) + "s" }

func render(p *plot.Plot, w, h vg.Length) (template.HTML, error) {
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	// The legend goes in a column right of the plot, where it hides no
	// data: p draws without it.
	legend := p.Legend
	p.Legend = plot.NewLegend()
	r := legend.Rectangle(dc)
	if lw := r.Max.X - r.Min.X; lw > 0 {
		lw += vg.Points(10)
		p.Draw(draw.Crop(dc, 0, -lw, 0, 0))
		legend.Top, legend.Left = true, true
		legend.YOffs = -vg.Points(24) // level with the plot's top, below the title
		legend.Draw(draw.Crop(dc, w-lw+vg.Points(6), 0, 0, 0))
	} else {
		p.Draw(dc)
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return "", err
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:] // inlined in HTML: no XML declaration
	}
	return template.HTML(s), nil // ours, its text escaped by vgsvg
}

// line adds one line to p; dashed draws it dashed.
func line(p *plot.Plot, name string, xys plotter.XYs, col color.Color, dashed bool) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	l.Color = col
	l.Width = vg.Points(1.2)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	}
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

// clusterCharts draws every chart of one cluster.
func clusterCharts(c *Cluster) ([]chart, error) {
	var out []chart
	add := func(ch chart, err error) error {
		if err != nil {
			return fmt.Errorf("cluster %s: %s chart: %w", c.Name, ch.Kind, err)
		}
		if ch.Points > 0 {
			out = append(out, ch)
		}
		return nil
	}
	for _, f := range []func(*Cluster) (chart, error){
		heldChart, blocksChart, queueChart, reservedChart, outcomesChart,
		ttftChart, pinChart, timelineChart, routedChart,
	} {
		if err := add(f(c)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// workersWith lists the series' worker indexes whose role is role.
func workersWith(s *cluster.Series, role string) []int {
	var out []int
	for i, r := range s.Roles {
		if r == role {
			out = append(out, i)
		}
	}
	return out
}

// workersOf lists the series' worker indexes whose role is not skip.
func workersOf(s *cluster.Series, skip string) []int {
	var out []int
	for i, r := range s.Roles {
		if r != skip {
			out = append(out, i)
		}
	}
	return out
}

// at is a point's time in modeled seconds: the end of its bucket, when
// its occupancy was read.
func at(s *cluster.Series, p *cluster.SeriesPoint) float64 {
	return (p.AtMs + s.IntervalMs) / 1000
}

func heldChart(c *Cluster) (chart, error) {
	s := &c.Series
	peak := c.PeakHeldBlocks()
	ch := chart{Kind: "held", Title: "Held KV blocks per prefill worker (stacked)", PeakHeld: &peak,
		Caption: fmt.Sprintf("Blocks held for a handoff, the most in each bucket of %s modeled. Peak %d held blocks across the cluster.",
			seconds(s.IntervalMs/1000), peak)}
	ws := workersWith(s, "prefill") // only a prefill worker holds KV for a handoff
	if len(s.Points) == 0 || len(ws) == 0 {
		return ch, nil
	}
	p := newPlot(ch.Title, "blocks")
	timeAxis(p, c.SpeedupRatio)
	// cumulative layers, drawn from the top so each fill leaves the
	// layers below it visible
	layers := make([]plotter.XYs, len(ws))
	for li := range layers {
		layers[li] = make(plotter.XYs, len(s.Points))
	}
	for pi := range s.Points {
		pt := &s.Points[pi]
		sum := 0.0
		for li, w := range ws {
			sum += float64(pt.Workers[w].Held)
			layers[li][pi] = plotter.XY{X: at(s, pt), Y: sum}
		}
	}
	for li := len(ws) - 1; li >= 0; li-- {
		l, err := plotter.NewLine(layers[li])
		if err != nil {
			return ch, err
		}
		col := plotutil.Color(li)
		l.Color = col
		l.FillColor = fade(col)
		p.Add(l)
		p.Legend.Add(s.Label(ws[li]), l)
	}
	total := make(plotter.XYs, len(s.Points))
	for pi := range s.Points {
		total[pi] = plotter.XY{X: at(s, &s.Points[pi]), Y: float64(s.Points[pi].HeldBlocks)}
	}
	if err := line(p, "cluster", total, colTotal, true); err != nil {
		return ch, err
	}
	p.Title.Text = fmt.Sprintf("%s: peak %d", ch.Title, peak)
	svg, err := render(p, chartWidth, chartHeight)
	ch.SVG, ch.Points = svg, len(s.Points)*len(ws)
	return ch, err
}

func fade(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 0x90}
}

// workerLines draws one line per worker in ws of what value reads.
func workerLines(p *plot.Plot, c *Cluster, ws []int, suffix string, dashed bool, value func(cluster.WorkerPoint) int) error {
	s := &c.Series
	for i, w := range ws {
		xys := make(plotter.XYs, len(s.Points))
		for pi := range s.Points {
			xys[pi] = plotter.XY{X: at(s, &s.Points[pi]), Y: float64(value(s.Points[pi].Workers[w]))}
		}
		if err := line(p, s.Label(w)+suffix, xys, plotutil.Color(i), dashed); err != nil {
			return err
		}
	}
	return nil
}

func blocksChart(c *Cluster) (chart, error) {
	s := &c.Series
	ch := chart{Kind: "blocks", Title: "Active and free KV blocks per worker",
		Caption: "Solid: blocks in use by running sequences (active). Dashed: blocks free for new work."}
	ws := workersOf(s, "")
	if len(s.Points) == 0 || len(ws) == 0 {
		return ch, nil
	}
	p := newPlot(ch.Title, "blocks")
	timeAxis(p, c.SpeedupRatio)
	if err := workerLines(p, c, ws, " active", false, func(w cluster.WorkerPoint) int { return w.Active }); err != nil {
		return ch, err
	}
	if err := workerLines(p, c, ws, " free", true, func(w cluster.WorkerPoint) int { return w.Free }); err != nil {
		return ch, err
	}
	svg, err := render(p, chartWidth, chartHeight)
	ch.SVG, ch.Points = svg, 2*len(s.Points)*len(ws)
	return ch, err
}

func queueChart(c *Cluster) (chart, error) {
	s := &c.Series
	ch := chart{Kind: "queue", Title: "Decode queue depth",
		Caption: "Solid: requests waiting on each decode worker (for a slot or their KV). Dashed: requests running."}
	ws := workersOf(s, "prefill")
	if len(s.Points) == 0 || len(ws) == 0 {
		return ch, nil
	}
	p := newPlot(ch.Title, "requests")
	timeAxis(p, c.SpeedupRatio)
	if err := workerLines(p, c, ws, " waiting", false, func(w cluster.WorkerPoint) int { return w.Waiting }); err != nil {
		return ch, err
	}
	if err := workerLines(p, c, ws, " running", true, func(w cluster.WorkerPoint) int { return w.Running }); err != nil {
		return ch, err
	}
	svg, err := render(p, chartWidth, chartHeight)
	ch.SVG, ch.Points = svg, 2*len(s.Points)*len(ws)
	return ch, err
}

func reservedChart(c *Cluster) (chart, error) {
	s := &c.Series
	ch := chart{Kind: "reserved", Title: "Decode reservations waiting for their KV",
		Caption: "Blocks each decode worker reserved for a transfer that has not landed yet."}
	ws := workersWith(s, "decode") // aggregated workers reserve nothing
	if len(s.Points) == 0 || len(ws) == 0 {
		return ch, nil
	}
	p := newPlot(ch.Title, "reserved blocks")
	timeAxis(p, c.SpeedupRatio)
	if err := workerLines(p, c, ws, "", false, func(w cluster.WorkerPoint) int { return w.Reserved }); err != nil {
		return ch, err
	}
	svg, err := render(p, chartWidth, chartHeight)
	ch.SVG, ch.Points = svg, len(s.Points)*len(ws)
	return ch, err
}

func outcomesChart(c *Cluster) (chart, error) {
	s := &c.Series
	ch := chart{Kind: "outcomes", Title: "Requests by outcome",
		Caption: "Requests ended per modeled second, by outcome. Markers: × holds aborted by their deadline, ▲ requests refused because every prefill worker was busy."}
	if len(s.Points) == 0 {
		return ch, nil
	}
	p := newPlot(ch.Title, "requests / modeled s")
	timeAxis(p, c.SpeedupRatio)
	// Counts per bucket are spiky at the series' finest interval: they are
	// summed over groups of buckets, at most outcomeBars of them.
	groups, k := mergePoints(s, outcomeBars)
	perS := 1000 / (s.IntervalMs * float64(k))
	series := []struct {
		name string
		col  color.Color
		get  func(*cluster.SeriesPoint) uint64
	}{
		{cluster.OutcomeCompleted, colCompleted, func(p *cluster.SeriesPoint) uint64 { return p.Completed }},
		{cluster.OutcomeAborted, colAborted, func(p *cluster.SeriesPoint) uint64 { return p.Aborted }},
		{cluster.OutcomeRejected, colRejected, func(p *cluster.SeriesPoint) uint64 { return p.Rejected }},
	}
	for _, sr := range series {
		xys := make(plotter.XYs, len(groups))
		for i := range groups {
			xys[i] = plotter.XY{X: groups[i].AtMs / 1000, Y: float64(sr.get(&groups[i])) * perS}
		}
		if err := line(p, sr.name, xys, sr.col, false); err != nil {
			return ch, err
		}
	}
	markers := []struct {
		name  string
		col   color.Color
		shape draw.GlyphDrawer
		get   func(*cluster.SeriesPoint) uint64
	}{
		{"hold aborts", colAborted, draw.CrossGlyph{}, func(p *cluster.SeriesPoint) uint64 { return p.HoldAborts }},
		{"prefill refusals", colRejected, draw.TriangleGlyph{}, func(p *cluster.SeriesPoint) uint64 { return p.PrefillRefusals }},
	}
	for _, m := range markers {
		var xys plotter.XYs
		for i := range groups {
			if n := m.get(&groups[i]); n > 0 {
				xys = append(xys, plotter.XY{X: groups[i].AtMs / 1000, Y: float64(n) * perS})
			}
		}
		if len(xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return ch, err
		}
		sc.Color, sc.Shape, sc.Radius = m.col, m.shape, vg.Points(3)
		p.Add(sc)
		p.Legend.Add(m.name, sc)
	}
	svg, err := render(p, chartWidth, chartHeight)
	ch.SVG, ch.Points = svg, 3*len(groups)
	return ch, err
}

// outcomeBars bounds the points of the outcomes chart.
const outcomeBars = 100

// mergePoints sums the outcome counts of s over groups of consecutive
// points, k of them per group, so that at most n remain; each group's
// AtMs is its end.
func mergePoints(s *cluster.Series, n int) (groups []cluster.SeriesPoint, k int) {
	k = (len(s.Points) + n - 1) / n
	out := make([]cluster.SeriesPoint, 0, n)
	for i := 0; i < len(s.Points); i += k {
		var g cluster.SeriesPoint
		for _, p := range s.Points[i:min(i+k, len(s.Points))] {
			g.Completed += p.Completed
			g.Aborted += p.Aborted
			g.Rejected += p.Rejected
			g.HoldAborts += p.HoldAborts
			g.PrefillRefusals += p.PrefillRefusals
		}
		g.AtMs = s.Points[i].AtMs + float64(k)*s.IntervalMs
		out = append(out, g)
	}
	return out, k
}

func quantileChart(kind, title, caption string, ds []Distribution) (chart, error) {
	ch := chart{Kind: kind, Title: title, Caption: caption}
	p := newPlot(title, "modeled ms")
	p.X.Label.Text = "percentile"
	p.X.Min, p.X.Max = 0, 100
	for _, d := range ds {
		if d.Count == 0 || len(d.Quantiles) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(d.Quantiles))
		for i, q := range d.Quantiles {
			xys[i] = plotter.XY{X: float64(i) * 100 / float64(max(1, len(d.Quantiles)-1)), Y: q}
		}
		if err := line(p, fmt.Sprintf("%s (%d)", d.Label, d.Count), xys, outcomeColor(d.Label), false); err != nil {
			return ch, err
		}
		ch.Points += len(xys)
	}
	if ch.Points == 0 {
		return ch, nil
	}
	svg, err := render(p, chartWidth, chartHeight)
	ch.SVG = svg
	return ch, err
}

func ttftChart(c *Cluster) (chart, error) {
	return quantileChart("ttft", "Time to first token by percentile",
		"TTFT of every request that produced a token (mocker_ttft), in modeled ms.", []Distribution{c.TTFT})
}

func pinChart(c *Cluster) (chart, error) {
	return quantileChart("pin", "Prefill KV hold duration by percentile",
		"How long prefill workers held KV for a handoff (mocker_kv_pin_duration), by how the hold ended. An aborted hold lasts the abort timeout.",
		c.HoldDurations)
}

// timelineChart draws one bar per hold, from its start to its end, in
// rows grouped by prefill → decode pair.
func timelineChart(c *Cluster) (chart, error) {
	hs := longestHolds(c.Holds, MaxHolds, c.Stats.NowMs)
	ch := chart{Kind: "timeline", Title: "Hold timeline",
		Caption: fmt.Sprintf("The %d longest holds known at the end (of %d started), one bar each from the prefill's first token to the release, by prefill → decode pair. Green: transferred, red: aborted, grey: still held.",
			len(hs), c.Stats.Holds)}
	if len(hs) == 0 {
		return ch, nil
	}
	sort.SliceStable(hs, func(i, j int) bool {
		a, b := hs[i], hs[j]
		if a.PrefillWorker != b.PrefillWorker {
			return a.PrefillWorker < b.PrefillWorker
		}
		if a.DecodeWorker != b.DecodeWorker {
			return a.DecodeWorker < b.DecodeWorker
		}
		return a.StartMs < b.StartMs
	})
	var ticks []plot.Tick
	for i := 0; i < len(hs); {
		j := i
		for j < len(hs) && hs[j].PrefillWorker == hs[i].PrefillWorker && hs[j].DecodeWorker == hs[i].DecodeWorker {
			j++
		}
		ticks = append(ticks, plot.Tick{Value: float64(i+j-1) / 2, Label: hs[i].PrefillWorker + " → " + orDash(hs[i].DecodeWorker)})
		i = j
	}
	p := newPlot(ch.Title, "")
	timeAxis(p, c.SpeedupRatio)
	p.Y.Min = -1
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Add(holdBars(hs))
	for _, o := range []string{"transferred", cluster.OutcomeAborted, ""} {
		name := o
		if o == "" {
			name = "held"
		}
		p.Legend.Add(name, swatch{outcomeColor(o)})
	}
	// full page width: drawn twice as wide as the other charts so that
	// its text is their size
	h := max(chartHeight, 3*vg.Centimeter+vg.Length(len(hs))*0.09*vg.Centimeter)
	svg, err := render(p, 2*chartWidth, h)
	ch.SVG, ch.Points = svg, len(hs)
	return ch, err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// holdBars is a plotter: one horizontal bar per hold, row i for hs[i].
type holdBars []cluster.Hold

func (hb holdBars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	for i, h := range hb {
		x0, x1 := trX(h.StartMs/1000), trX(h.EndMs/1000)
		x1 = max(x1, x0+vg.Points(1)) // a hold too short to see still shows
		y0, y1 := trY(float64(i)-0.4), trY(float64(i)+0.4)
		if y1-y0 < vg.Points(0.6) {
			y1 = y0 + vg.Points(0.6)
		}
		poly := c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
		c.FillPolygon(outcomeColor(h.Outcome), poly)
	}
}

func (hb holdBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin = hb[0].StartMs / 1000
	for _, h := range hb {
		xmin = min(xmin, h.StartMs/1000)
		xmax = max(xmax, h.EndMs/1000)
	}
	return xmin, xmax, -1, float64(len(hb))
}

// swatch is a legend entry: a filled square.
type swatch struct{ col color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	c.FillPolygon(s.col, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
}

func routedChart(c *Cluster) (chart, error) {
	ch := chart{Kind: "routed", Title: "Router decisions per worker",
		Caption: "Requests the router sent to each worker: a disaggregated request counts once on its prefill worker and once on its decode worker."}
	if len(c.Routed) == 0 {
		return ch, nil
	}
	p := newPlot(ch.Title, "requests")
	vals := make(plotter.Values, len(c.Routed))
	names := make([]string, len(c.Routed))
	for i, r := range c.Routed {
		vals[i], names[i] = float64(r.Requests), r.Worker
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(24))
	if err != nil {
		return ch, err
	}
	bars.Color = color.RGBA{R: 0x15, G: 0x65, B: 0xc0, A: 0xff}
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	svg, err := render(p, chartWidth, chartHeight)
	ch.SVG, ch.Points = svg, len(vals)
	return ch, err
}
