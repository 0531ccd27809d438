package report

import (
	"cmp"
	"html/template"
	"io"
	"slices"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// SweepPoint is one configuration of a sweep, as its page shows it.
type SweepPoint struct {
	// Label names the configuration by its grid values.
	Label string
	GPUs  int
	// GoodputPerGPU is good requests per modeled second per GPU;
	// TTFTP90Ms the 90th percentile of time to first token.
	GoodputPerGPU, TTFTP90Ms float64
	// Pareto says no other configuration beats it on both.
	Pareto bool
	// The stranding figures: holds, holds aborted, the peak of held
	// blocks, prefills refused.
	Holds, Aborted  uint64
	PeakHeldBlocks  int
	PrefillRefusals uint64
	// Error says why the configuration did not run; its point is not
	// drawn.
	Error string
}

// WriteSweep renders a sweep as one self-contained HTML document:
// goodput per GPU against TTFT p90 with the Pareto front joined, and a
// table of every configuration with its stranding figures.
func WriteSweep(w io.Writer, title string, pts []SweepPoint) error {
	p := newPlot("goodput per GPU against TTFT p90", "goodput per GPU (req/s)")
	p.X.Label.Text = "TTFT p90 (modeled ms)"
	var all, front plotter.XYs
	for _, pt := range pts {
		if pt.Error != "" {
			continue
		}
		xy := plotter.XY{X: pt.TTFTP90Ms, Y: pt.GoodputPerGPU}
		all = append(all, xy)
		if pt.Pareto {
			front = append(front, xy)
		}
	}
	var svg template.HTML
	if len(all) > 0 {
		s, err := plotter.NewScatter(all)
		if err != nil {
			return err
		}
		s.GlyphStyle.Color = colOpen
		s.GlyphStyle.Radius = vg.Points(2.5)
		p.Add(s)
		p.Legend.Add("configuration", s)
		if len(front) > 0 {
			slices.SortFunc(front, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
			l, err := plotter.NewLine(front)
			if err != nil {
				return err
			}
			l.Color = colCompleted
			l.Width = vg.Points(1.2)
			fs, err := plotter.NewScatter(front)
			if err != nil {
				return err
			}
			fs.GlyphStyle.Color = colCompleted
			fs.GlyphStyle.Radius = vg.Points(3.5)
			fs.GlyphStyle.Shape = draw.CircleGlyph{}
			p.Add(l, fs)
			p.Legend.Add("Pareto front", l, fs)
		}
		var err2 error
		if svg, err2 = render(p, chartWidth, chartHeight+2*vg.Centimeter); err2 != nil {
			return err2
		}
	}
	return sweepTemplate.Execute(w, struct {
		Title  string
		SVG    template.HTML
		Points []SweepPoint
	}{title, svg, pts})
}

var sweepTemplate = template.Must(template.New("sweep").Parse(htmlHead + `<title>mocker sweep{{with .Title}}: {{.}}{{end}}</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #212121; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { padding: 0.2em 0.8em; border-bottom: 1px solid #e0e0e0; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.front td { font-weight: bold; }
td.error { color: #c62828; text-align: left; }
</style>
</head>
<body>
<h1>mocker sweep{{with .Title}}: {{.}}{{end}}</h1>
{{if .SVG}}<figure data-chart="pareto">{{.SVG}}</figure>{{end}}
<table>
<tr><th>configuration</th><th>GPUs</th><th>goodput per GPU</th><th>TTFT p90 (ms)</th><th>Pareto</th><th>holds</th><th>aborted</th><th>peak held blocks</th><th>prefill refusals</th></tr>
{{range .Points}}{{if .Error}}<tr><td>{{.Label}}</td><td class="error" colspan="8">{{.Error}}</td></tr>
{{else}}<tr{{if .Pareto}} class="front"{{end}}><td>{{.Label}}</td><td>{{.GPUs}}</td><td>{{printf "%.3f" .GoodputPerGPU}}</td><td>{{printf "%.1f" .TTFTP90Ms}}</td><td>{{if .Pareto}}yes{{end}}</td><td>{{.Holds}}</td><td>{{.Aborted}}</td><td>{{.PeakHeldBlocks}}</td><td>{{.PrefillRefusals}}</td></tr>
{{end}}{{end}}</table>
</body>
</html>
`))
