package report

import (
	"fmt"
	"html/template"
	"math"
	"sort"
	"strings"
	"time"
)

// page is what the template renders.
type page struct {
	Title    string
	Harness  *harnessView
	Clusters []clusterView
}

type clusterView struct {
	Name, Heading string
	PeakHeld      int
	Figures       [][2]string
	Charts        []chart
}

type harnessView struct {
	Figures    [][2]string
	Thresholds []thresholdView
	Checks     []SummaryCheck
}

type thresholdView struct {
	Metric, Source, Observed string
	OK                       bool
}

func build(r Report) (page, error) {
	pg := page{Title: r.Title}
	if r.Summary != nil {
		pg.Harness = harnessFigures(r.Summary)
	}
	for i := range r.Clusters {
		c := &r.Clusters[i]
		charts, err := clusterCharts(c)
		if err != nil {
			return page{}, err
		}
		st := c.Stats
		cv := clusterView{
			Name:     c.Name,
			Heading:  fmt.Sprintf("cluster %q: %s, router %s, %s", c.Name, c.Engine, c.Router, c.Topology),
			PeakHeld: c.PeakHeldBlocks(),
			Charts:   charts,
			Figures: [][2]string{
				{"requests", fmt.Sprintf("%d (completed %d, aborted %d, rejected %d, error %d)", st.Requests, st.Completed, st.Aborted, st.Rejected, st.Errored)},
				{"holds", fmt.Sprintf("%d started, %d transferred, %d aborted, %d cancelled", st.Holds, st.HoldsReleased, st.HoldsAborted, st.HoldsCancelled)},
				{"peak held blocks", fmt.Sprint(st.PeakHeldBlocks)},
				{"prefill refusals", fmt.Sprint(st.PrefillRejections)},
				{"modeled time", fmt.Sprintf("%s (speedup_ratio %g: %s of script time)", seconds(st.NowMs/1000), c.SpeedupRatio, seconds(scriptSeconds(st.NowMs/1000, c.SpeedupRatio)))},
				{"host lag", fmt.Sprintf("at most %s behind the wall clock", c.ClockLagPeak.Round(time.Millisecond))},
			},
		}
		if st.G2Capacity > 0 {
			cv.Figures = append(cv.Figures, [2]string{"host (G2) tier",
				fmt.Sprintf("%d of %d blocks held at the end, %d onboarded on prefix hits", st.G2Blocks, st.G2Capacity, st.G2Onboarded)})
		}
		if st.G3Capacity > 0 {
			cv.Figures = append(cv.Figures, [2]string{"disk (G3) tier",
				fmt.Sprintf("%d of %d blocks held at the end, %d onboarded on prefix hits", st.G3Blocks, st.G3Capacity, st.G3Onboarded)})
		}
		if st.G4Blocks > 0 {
			cv.Figures = append(cv.Figures, [2]string{"object (G4) tier",
				fmt.Sprintf("%d blocks held at the end, %d onboarded on prefix hits", st.G4Blocks, st.G4Onboarded)})
		}
		pg.Clusters = append(pg.Clusters, cv)
	}
	return pg, nil
}

// harnessFigures reads the harness's figures from the run's summary.
func harnessFigures(s *Summary) *harnessView {
	hv := &harnessView{Checks: s.Checks}
	values := func(name string) map[string]float64 {
		m, ok := s.Metrics[name]
		if !ok {
			return nil
		}
		return m.Values
	}
	stat := func(v map[string]float64, k string) *float64 {
		if f, ok := v[k]; ok {
			return &f
		}
		return nil
	}
	if d := s.TestRunDurationMs; d != nil {
		hv.Figures = append(hv.Figures, [2]string{"test run duration (script time)", seconds(*d / 1000)})
	}
	if v := values("vus"); v != nil {
		hv.Figures = append(hv.Figures, [2]string{"VUs", fmt.Sprintf("min %s, max %s", num(stat(v, "min")), num(stat(v, "max")))})
	}
	if v := values("vus_max"); v != nil {
		hv.Figures = append(hv.Figures, [2]string{"VUs initialised", num(stat(v, "value"))})
	}
	if v := values("iterations"); v != nil {
		hv.Figures = append(hv.Figures, [2]string{"iterations", fmt.Sprintf("%s (%s/s of script time)", num(stat(v, "count")), num(stat(v, "rate")))})
	}
	if v := values("iteration_duration"); v != nil {
		hv.Figures = append(hv.Figures, [2]string{"iteration duration (script time)", fmt.Sprintf("avg %s, p(95) %s", msText(stat(v, "avg")), msText(stat(v, "p(95)")))})
	}
	if v := values("checks"); v != nil {
		total := v["passes"] + v["fails"]
		hv.Figures = append(hv.Figures, [2]string{"checks", fmt.Sprintf("%s passed of %s", num(stat(v, "passes")), num(&total))})
	}
	for _, name := range s.names() {
		m := s.Metrics[name]
		srcs := make([]string, 0, len(m.Thresholds))
		for src := range m.Thresholds {
			srcs = append(srcs, src)
		}
		sort.Strings(srcs)
		for _, src := range srcs {
			th := m.Thresholds[src]
			obs := num(th.Observed)
			if m.Contains == "time" && !strings.Contains(src, "rate") && !strings.Contains(src, "count") {
				obs = msText(th.Observed)
			}
			if th.NoSamples {
				obs = "no samples"
			}
			hv.Thresholds = append(hv.Thresholds, thresholdView{Metric: name, Source: src, Observed: obs, OK: th.OK})
		}
	}
	return hv
}

func num(v *float64) string {
	if v == nil {
		return "-"
	}
	f := *v
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.4g", f)
}

func msText(v *float64) string {
	if v == nil {
		return "-"
	}
	f := *v
	switch {
	case f >= 1000:
		return fmt.Sprintf("%.2fs", f/1000)
	case f >= 1:
		return fmt.Sprintf("%.2fms", f)
	}
	return fmt.Sprintf("%.0fµs", f*1000)
}

// htmlHead opens every page the package writes, up to its title.
const htmlHead = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
`

var pageTemplate = template.Must(template.New("report").Parse(htmlHead + `<title>mocker report{{with .Title}}: {{.}}{{end}}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1400px; padding: 1em 2em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: .2em; }
h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0 1em; }
td, th { padding: .15em .8em .15em 0; text-align: left; vertical-align: top; }
th { font-weight: 600; color: #555; }
.pass { color: #2e7d32; font-weight: 600; }
.fail { color: #c62828; font-weight: 600; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 1em; }
figure { margin: 0; border: 1px solid #e0e0e0; border-radius: 4px; padding: .5em; }
figure.timeline { grid-column: 1 / -1; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { font-size: .85em; color: #555; margin-top: .3em; }
.peak { font-weight: 600; }
</style>
</head>
<body>
<h1>mocker report</h1>
{{with .Title}}<p>script: <code>{{.}}</code></p>{{end}}
<p>Times are modeled (the clusters' clock) unless marked as script time (the run's clock: paced with the wall clock, or virtual); modeled = script time × speedup_ratio.</p>
{{with .Harness}}
<section id="harness">
<h2>Harness</h2>
<table class="figures">{{range .Figures}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
{{if .Thresholds}}<h3>Thresholds</h3>
<table class="thresholds"><tr><th></th><th>metric</th><th>threshold</th><th>value</th></tr>
{{range .Thresholds}}<tr data-ok="{{.OK}}"><td class="{{if .OK}}pass{{else}}fail{{end}}">{{if .OK}}✓ pass{{else}}✗ fail{{end}}</td><td><code>{{.Metric}}</code></td><td><code>{{.Source}}</code></td><td>{{.Observed}}</td></tr>
{{end}}</table>{{end}}
{{if .Checks}}<h3>Checks</h3>
<table class="checks"><tr><th>check</th><th>passes</th><th>fails</th></tr>
{{range .Checks}}<tr><td>{{.Path}}</td><td>{{.Passes}}</td><td{{if .Fails}} class="fail"{{end}}>{{.Fails}}</td></tr>
{{end}}</table>{{end}}
</section>
{{end}}
{{range .Clusters}}
<section class="cluster" data-cluster="{{.Name}}">
<h2>{{.Heading}}</h2>
<table class="figures">{{range .Figures}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
<div class="charts">
{{range .Charts}}<figure class="chart {{.Kind}}" data-chart="{{.Kind}}" data-points="{{.Points}}"{{with .PeakHeld}} data-peak-held-blocks="{{.}}"{{end}}>
{{.SVG}}
<figcaption>{{.Caption}}{{with .PeakHeld}} <span class="peak">peak held blocks: <span class="peak-value">{{.}}</span></span>{{end}}</figcaption>
</figure>
{{end}}</div>
</section>
{{else}}<p>No mock cluster was used in this run.</p>
{{end}}
</body>
</html>
`))
