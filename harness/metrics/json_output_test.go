package metrics

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type envelope struct {
	Type   string          `json:"type"`
	Metric string          `json:"metric"`
	Data   json.RawMessage `json:"data"`
}

type metricData struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Contains   string          `json:"contains"`
	Thresholds []string        `json:"thresholds"`
	Submetrics json.RawMessage `json:"submetrics"`
}

type pointData struct {
	Time  string            `json:"time"`
	Value float64           `json:"value"`
	Tags  map[string]string `json:"tags"`
}

func decodeLines(t *testing.T, b []byte) []envelope {
	t.Helper()
	var out []envelope
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var e envelope
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		var keys map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(sc.Bytes(), &keys))
		assert.Len(t, keys, 3, "a line has exactly type, data and metric: %s", sc.Text())
		out = append(out, e)
	}
	require.NoError(t, sc.Err())
	return out
}

func TestJSONOutput_MetricOnceThenPoints(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	dur, _ := reg.Get("http_req_duration")
	iters, _ := reg.Get("iterations")
	ts := mustThresholds(t, reg, map[string][]Threshold{
		"http_req_duration":             ths("p(95)<200", "avg<100"),
		"http_req_duration{status:200}": ths("max<1"),
	})
	var buf bytes.Buffer
	c := NewCollector(reg, ts, NewJSONOutput(&buf))
	when := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	tags := NewTags(map[string]string{"status": "200", "name": "quote\"and\\slash\nline é"})
	c.Add(Sample{Metric: dur, Tags: tags, Time: when, Value: 12.5})
	c.Add(Sample{Metric: iters, Time: when, Value: 1})
	c.Add(Sample{Metric: dur, Time: when.Add(time.Second), Value: 1e-9})
	before := time.Now()
	c.Add(Sample{Metric: iters, Value: 1}) // no time: stamped when collected
	require.NoError(t, c.Close())

	lines := decodeLines(t, buf.Bytes())
	require.Len(t, lines, 6)
	wantKinds := []struct{ typ, metric string }{
		{"Metric", "http_req_duration"}, {"Point", "http_req_duration"},
		{"Metric", "iterations"}, {"Point", "iterations"},
		{"Point", "http_req_duration"}, {"Point", "iterations"},
	}
	for i, w := range wantKinds {
		assert.Equal(t, w.typ, lines[i].Type, i)
		assert.Equal(t, w.metric, lines[i].Metric, i)
	}

	var md metricData
	require.NoError(t, json.Unmarshal(lines[0].Data, &md))
	assert.Equal(t, metricData{Name: "http_req_duration", Type: "trend", Contains: "time",
		Thresholds: []string{"p(95)<200", "avg<100"}, Submetrics: md.Submetrics}, md)
	var subs []map[string]any
	require.NoError(t, json.Unmarshal(md.Submetrics, &subs))
	assert.Equal(t, []map[string]any{{"name": "http_req_duration{status:200}", "suffix": "status:200",
		"tags": map[string]any{"status": "200"}}}, subs)

	require.NoError(t, json.Unmarshal(lines[2].Data, &md))
	assert.Equal(t, []string{}, md.Thresholds)
	assert.Equal(t, "null", string(md.Submetrics))

	var p pointData
	require.NoError(t, json.Unmarshal(lines[1].Data, &p))
	assert.Equal(t, pointData{Time: "2026-03-04T05:06:07.123456789Z", Value: 12.5, Tags: tags.Map()}, p)
	var tiny pointData
	require.NoError(t, json.Unmarshal(lines[4].Data, &tiny))
	assert.Equal(t, 1e-9, tiny.Value)
	assert.Equal(t, map[string]string{}, tiny.Tags)
	var late pointData
	require.NoError(t, json.Unmarshal(lines[5].Data, &late))
	stamped, err := time.Parse(time.RFC3339Nano, late.Time)
	require.NoError(t, err)
	assert.False(t, stamped.Before(before.Truncate(time.Nanosecond).Add(-time.Second)))
}

func TestJSONOutput_ConcurrentWritersProduceWholeLines(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	dur, _ := reg.Get("http_req_duration")
	var buf bytes.Buffer
	out := NewJSONOutput(&buf)
	const goroutines, perG = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				out.AddSamples([]Sample{{Metric: dur, Time: time.Unix(0, 0), Value: float64(g*perG + i)}})
			}
		}()
	}
	wg.Wait()
	require.NoError(t, out.Close())
	lines := decodeLines(t, buf.Bytes())
	require.Len(t, lines, goroutines*perG+1)
	assert.Equal(t, "Metric", lines[0].Type)
	seen := map[float64]bool{}
	for _, l := range lines[1:] {
		var p pointData
		require.NoError(t, json.Unmarshal(l.Data, &p))
		seen[p.Value] = true
	}
	assert.Len(t, seen, goroutines*perG)
}

func TestJSONOutput_SkipsNonFinite(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	dur, _ := reg.Get("http_req_duration")
	var buf bytes.Buffer
	out := NewJSONOutput(&buf)
	out.AddSamples([]Sample{{Metric: dur, Value: math.NaN()}, {Metric: dur, Value: 2}, {Value: 3}})
	require.NoError(t, out.Close())
	assert.Len(t, decodeLines(t, buf.Bytes()), 2)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestJSONOutput_CloseReportsWriteError(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	dur, _ := reg.Get("http_req_duration")
	out := NewJSONOutput(failingWriter{})
	out.AddSamples([]Sample{{Metric: dur, Value: 1}})
	err := out.Close()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "disk full")
}

func TestJSONFileOutput_GzipByExtension(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	iters, _ := reg.Get("iterations")
	dir := t.TempDir()
	for _, name := range []string{"out.json", "out.json.gz"} {
		path := filepath.Join(dir, name)
		out, err := NewJSONFileOutput(path)
		require.NoError(t, err)
		out.AddSamples([]Sample{{Metric: iters, Time: time.Unix(1, 0), Value: 1}})
		require.NoError(t, out.Close())
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		if filepath.Ext(name) == ".gz" {
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			require.NoError(t, err)
			var plain bytes.Buffer
			_, err = plain.ReadFrom(zr)
			require.NoError(t, err)
			raw = plain.Bytes()
		}
		assert.Len(t, decodeLines(t, raw), 2, name)
	}
	_, err := NewJSONFileOutput(filepath.Join(dir, "missing", "x.json"))
	assert.Error(t, err)
}

func TestAppendJSONString_MatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "q\"b\\s", "ctl\x01\x1f\t\r\n", "é✓漢字", "bad\xffutf8", "<tag>&"} {
		got := appendJSONString(nil, s)
		var back string
		require.NoError(t, json.Unmarshal(got, &back), string(got))
		assert.Equal(t, strings.ToValidUTF8(s, "\ufffd"), back)
	}
	for _, f := range []float64{0, 1, -2.5, 1e-7, 1e21, 123456.789, math.SmallestNonzeroFloat64} {
		var back float64
		require.NoError(t, json.Unmarshal(appendJSONFloat(nil, f), &back))
		assert.Equal(t, f, back)
	}
}

func TestJSONFileOutput_FlushMakesLinesReadableBeforeClose(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	iters, _ := reg.Get("iterations")
	dir := t.TempDir()
	for _, name := range []string{"live.json", "live.json.gz"} {
		path := filepath.Join(dir, name)
		out, err := NewJSONFileOutput(path)
		require.NoError(t, err)
		out.AddSamples([]Sample{{Metric: iters, Time: time.Unix(1, 0), Value: 1}})
		require.NoError(t, out.(Flusher).Flush())
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		if filepath.Ext(name) == ".gz" {
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			require.NoError(t, err)
			var plain bytes.Buffer
			_, _ = plain.ReadFrom(zr) // the stream has no end yet: unexpected EOF
			raw = plain.Bytes()
		}
		assert.Len(t, decodeLines(t, raw), 2, name)
		require.NoError(t, out.Close())
	}
}
