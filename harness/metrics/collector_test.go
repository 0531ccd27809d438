package metrics

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustThresholds(t *testing.T, reg *Registry, raw map[string][]Threshold) *ThresholdSet {
	t.Helper()
	ts, err := ParseThresholds(raw, reg)
	require.NoError(t, err)
	return ts
}

func resultsBySource(rs []ThresholdResult) map[string]ThresholdResult {
	out := map[string]ThresholdResult{}
	for _, r := range rs {
		out[r.Key+" "+r.Source] = r
	}
	return out
}

func TestCollector_SinksPerType(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	iters, _ := reg.Get("iterations")
	vus, _ := reg.Get("vus")
	checks, _ := reg.Get("checks")
	dur, _ := reg.Get("http_req_duration")
	ts := mustThresholds(t, reg, map[string][]Threshold{
		"iterations":        ths("count==6", "rate==3"),
		"vus":               ths("value==2"),
		"checks":            ths("rate==0.75"),
		"http_req_duration": ths("avg==25", "min==10", "max==40", "med<=25.2", "p(100)==40", "p(0)==10"),
	})
	c := NewCollector(reg, ts)
	c.Add(Sample{Metric: iters, Value: 1}, Sample{Metric: iters, Value: 5})
	c.Add(Sample{Metric: vus, Value: 5}, Sample{Metric: vus, Value: 1}, Sample{Metric: vus, Value: 2})
	c.Add(Sample{Metric: checks, Value: 1}, Sample{Metric: checks, Value: 0},
		Sample{Metric: checks, Value: 1}, Sample{Metric: checks, Value: 1})
	for _, v := range []float64{10, 20, 30, 40} {
		c.Add(Sample{Metric: dur, Value: v})
	}
	failed, abort := c.Evaluate(2 * time.Second)
	rs := c.Results()
	for _, r := range rs {
		assert.True(t, r.OK, "%s %s observed %v", r.Key, r.Source, r.Observed)
		assert.False(t, r.NoSamples)
	}
	assert.False(t, failed)
	assert.False(t, abort)
	by := resultsBySource(rs)
	assert.Equal(t, 6.0, by["iterations count==6"].Observed)
	assert.Equal(t, 3.0, by["iterations rate==3"].Observed)
	assert.Equal(t, 2.0, by["vus value==2"].Observed)
	assert.Equal(t, 0.75, by["checks rate==0.75"].Observed)
	assert.InEpsilon(t, 25, by["http_req_duration med<=25.2"].Observed, 0.008)
	assert.Len(t, rs, 10)
}

func TestCollector_FailingThresholdReportsObserved(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	dur, _ := reg.Get("http_req_duration")
	c := NewCollector(reg, mustThresholds(t, reg, map[string][]Threshold{"http_req_duration": ths("p(95)<200", "max<1000")}))
	for i := 1; i <= 100; i++ {
		c.Add(Sample{Metric: dur, Value: float64(i * 5)}) // 5..500
	}
	failed, abort := c.Evaluate(time.Second)
	assert.True(t, failed)
	assert.False(t, abort, "no threshold has abortOnFail")
	by := resultsBySource(c.Results())
	p95 := by["http_req_duration p(95)<200"]
	assert.False(t, p95.OK)
	assert.InEpsilon(t, 475.25, p95.Observed, 0.008) // rank 94.05 of 5..500
	assert.True(t, by["http_req_duration max<1000"].OK)
	assert.Equal(t, []string{"http_req_duration"}, FailedKeys(c.Results(), false))
	assert.Empty(t, FailedKeys(c.Results(), true))
}

func TestCollector_SubmetricMatchesTagSubsets(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	dur, _ := reg.Get("http_req_duration")
	ts := mustThresholds(t, reg, map[string][]Threshold{
		"http_req_duration":                        ths("max>0"),
		"http_req_duration{status:200}":            ths("max==20"),
		`http_req_duration{ status: "200" }`:       ths("min==10"),
		"http_req_duration{status:200,method:GET}": ths("max==10"),
		"http_req_duration{status:500}":            ths("p(50)<1"),
	})
	c := NewCollector(reg, ts)
	get := NewTags(map[string]string{"status": "200", "method": "GET", "url": "/a"})
	post := NewTags(map[string]string{"status": "200", "method": "POST"})
	c.Add(Sample{Metric: dur, Tags: get, Value: 10}, Sample{Metric: dur, Tags: post, Value: 20},
		Sample{Metric: dur, Value: 99})
	c.Evaluate(time.Second)
	by := resultsBySource(c.Results())
	for k, r := range by {
		assert.True(t, r.OK, "%s observed %v", k, r.Observed)
		assert.False(t, r.NoSamples, k)
	}
	assert.Equal(t, 99.0, by["http_req_duration max>0"].Observed)
	// The two spellings of {status:200} share one sink.
	st := c.stateFor(dur)
	assert.Len(t, st.subs, 3)
}

func TestCollector_EmptyMetricsAreZerosExceptRate(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	c := NewCollector(reg, mustThresholds(t, reg, map[string][]Threshold{
		"checks":            ths("rate>=0.9", "rate<0.1"),
		"http_req_duration": ths("p(95)<200", "avg>1", "p(95)>100", "max==0"),
		"vus":               ths("value>3", "value==0"),
		"iterations":        ths("count>0", "rate<5", "rate>0"),
	}))
	failed, _ := c.Evaluate(time.Second)
	assert.True(t, failed)
	by := resultsBySource(c.Results())
	// As k6: an empty Rate has no rate, so its thresholds are skipped.
	for _, k := range []string{"checks rate>=0.9", "checks rate<0.1"} {
		assert.True(t, by[k].OK, k)
		assert.True(t, by[k].NoSamples, k)
	}
	// Every other empty metric measured zeros, and is judged on them.
	for k, ok := range map[string]bool{
		"http_req_duration p(95)<200": true, "http_req_duration avg>1": false,
		"http_req_duration p(95)>100": false, "http_req_duration max==0": true,
		"vus value>3": false, "vus value==0": true,
		"iterations count>0": false, "iterations rate<5": true, "iterations rate>0": false,
	} {
		assert.Equal(t, ok, by[k].OK, k)
		assert.False(t, by[k].NoSamples, k)
		assert.Equal(t, 0.0, by[k].Observed, k)
	}
	assert.Equal(t, []string{"http_req_duration", "iterations", "vus"}, FailedKeys(c.Results(), false))
}

func TestCollector_AbortOnFailWaitsForDelay(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	checks, _ := reg.Get("checks")
	c := NewCollector(reg, mustThresholds(t, reg, map[string][]Threshold{
		"checks": {{Source: "rate>0.9", AbortOnFail: true, DelayAbortEval: 10 * time.Second}},
	}))
	c.Add(Sample{Metric: checks, Value: 0})
	tests := []struct {
		elapsed time.Duration
		abort   bool
	}{
		{0, false}, {9 * time.Second, false}, {10 * time.Second, true}, {time.Minute, true},
	}
	for _, tt := range tests {
		failed, abort := c.Evaluate(tt.elapsed)
		assert.True(t, failed, tt.elapsed)
		assert.Equal(t, tt.abort, abort, tt.elapsed)
	}
	assert.Equal(t, []string{"checks"}, FailedKeys(c.Results(), true))

	// Once the threshold holds again there is nothing to abort for.
	for range 20 {
		c.Add(Sample{Metric: checks, Value: 1})
	}
	failed, abort := c.Evaluate(time.Minute)
	assert.False(t, failed)
	assert.False(t, abort)
}

func TestCollector_AbortWithoutDelayIsImmediate(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	aborts, _ := reg.Get("mocker_kv_aborts")
	c := NewCollector(reg, mustThresholds(t, reg, map[string][]Threshold{
		"mocker_kv_aborts": {{Source: "count<1", AbortOnFail: true}, {Source: "count<100"}},
	}))
	_, abort := c.Evaluate(0)
	assert.False(t, abort)
	c.Add(Sample{Metric: aborts, Value: 1})
	failed, abort := c.Evaluate(0)
	assert.True(t, failed)
	assert.True(t, abort)
}

func TestCollector_DropsNonFiniteAndNilMetric(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	dur, _ := reg.Get("http_req_duration")
	c := NewCollector(reg, mustThresholds(t, reg, map[string][]Threshold{"http_req_duration": ths("max<10")}))
	c.Add(Sample{Metric: dur, Value: math.NaN()}, Sample{Metric: dur, Value: math.Inf(1)},
		Sample{Value: 1e9}, Sample{Metric: dur, Value: 5})
	failed, _ := c.Evaluate(time.Second)
	assert.False(t, failed)
	assert.Equal(t, uint64(1), c.stateFor(dur).sink.count())
}

func TestCollector_MetricsFromAnotherRegistry(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	other := NewRegistry()
	m := other.MustRegister("elsewhere", Counter, Default)
	c := NewCollector(reg, nil)
	c.Add(Sample{Metric: m, Value: 2}, Sample{Metric: m, Value: 3})
	data := c.SummaryData(SummaryOptions{TestRunDuration: time.Second})
	vals := data["metrics"].(map[string]any)["elsewhere"].(map[string]any)["values"].(map[string]any)
	assert.Equal(t, 5.0, vals["count"])
}

func TestCollector_MetricsRegisteredAfterCollectorStarts(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	c := NewCollector(reg, nil)
	for i := range 50 {
		m := reg.MustRegister("m"+string(rune('a'+i%26))+string(rune('a'+i/26)), Counter, Default)
		c.Add(Sample{Metric: m, Value: float64(i)})
	}
	metrics := c.SummaryData(SummaryOptions{TestRunDuration: time.Second})["metrics"].(map[string]any)
	assert.Len(t, metrics, 50)
	assert.Equal(t, 49.0, metrics["mxb"].(map[string]any)["values"].(map[string]any)["count"])
}

// Many goroutines adding to the same metrics and submetrics while thresholds
// are evaluated and outputs written: totals must be exact (run with -race).
func TestCollector_ConcurrentAddIsExact(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	iters, _ := reg.Get("iterations")
	dur, _ := reg.Get("http_req_duration")
	checks, _ := reg.Get("checks")
	ts := mustThresholds(t, reg, map[string][]Threshold{
		"iterations":                ths("count>0"),
		"http_req_duration{vu:odd}": ths("max>0"),
		"http_req_duration{kind:a}": ths("max>0"),
		"checks":                    ths("rate>0"),
	})
	out := &recordingOutput{}
	c := NewCollector(reg, ts, out)
	const goroutines, perG = 16, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tags := NewTags(map[string]string{"kind": "a"})
			if g%2 == 1 {
				tags = tags.With("kind", "b")
			}
			for i := range perG {
				c.Add(Sample{Metric: iters, Value: 1}, Sample{Metric: dur, Tags: tags, Value: float64(i%100 + 1)},
					Sample{Metric: checks, Value: float64(i % 2)})
				if i%500 == 0 {
					c.Evaluate(time.Second)
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, c.Close())

	data := c.SummaryData(SummaryOptions{TestRunDuration: 2 * time.Second, TrendStats: []string{"count", "min", "max"}})
	metrics := data["metrics"].(map[string]any)
	values := func(k string) map[string]any { return metrics[k].(map[string]any)["values"].(map[string]any) }
	assert.Equal(t, float64(goroutines*perG), values("iterations")["count"])
	assert.Equal(t, float64(goroutines*perG)/2, values("iterations")["rate"])
	assert.Equal(t, float64(goroutines*perG), values("http_req_duration")["count"])
	assert.Equal(t, float64(goroutines*perG/2), values("http_req_duration{kind:a}")["count"])
	assert.Equal(t, 0.0, values("http_req_duration{vu:odd}")["count"])
	assert.Equal(t, 0.5, values("checks")["rate"])
	assert.Equal(t, goroutines*perG*3, out.total())
	assert.True(t, out.closed)
}

type recordingOutput struct {
	mu     sync.Mutex
	n      int
	closed bool
	th     *ThresholdSet
}

func (r *recordingOutput) AddSamples(s []Sample) {
	r.mu.Lock()
	r.n += len(s)
	r.mu.Unlock()
}

func (r *recordingOutput) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

func (r *recordingOutput) SetThresholds(th *ThresholdSet) { r.th = th }

func (r *recordingOutput) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func TestCollector_OutputsGetBatchesAndThresholds(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	iters, _ := reg.Get("iterations")
	ts := mustThresholds(t, reg, map[string][]Threshold{"iterations": ths("count>0")})
	out := &recordingOutput{}
	c := NewCollector(reg, ts, out)
	assert.Same(t, ts, out.th)
	for range outputBatch - 1 {
		c.Add(Sample{Metric: iters, Value: 1})
	}
	assert.Equal(t, 0, out.total(), "below one batch nothing is delivered yet")
	c.Add(Sample{Metric: iters, Value: 1}, Sample{Metric: iters, Value: 1})
	assert.Equal(t, outputBatch+1, out.total())
	c.Add(Sample{Metric: iters, Value: 1})
	c.Flush()
	assert.Equal(t, outputBatch+2, out.total())
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	c.Add(Sample{Metric: iters, Value: 1})
	c.Flush()
	assert.Equal(t, outputBatch+2, out.total(), "nothing reaches outputs after Close")
}

func TestCollector_AddDoesNotAllocate(t *testing.T) {
	reg := testRegistry(t)
	iters, _ := reg.Get("iterations")
	dur, _ := reg.Get("http_req_duration")
	c := NewCollector(reg, mustThresholds(t, reg, map[string][]Threshold{"http_req_duration{scenario:a}": ths("p(95)<1")}))
	tags := NewTags(map[string]string{"scenario": "a", "group": ""})
	c.Add(Sample{Metric: dur, Tags: tags, Value: 3}) // first sample creates state
	c.Add(Sample{Metric: iters, Tags: tags, Value: 1})
	allocs := testing.AllocsPerRun(1000, func() {
		c.Add(Sample{Metric: iters, Tags: tags, Value: 1}, Sample{Metric: dur, Tags: tags, Value: 3})
	})
	assert.Zero(t, allocs)
}

func BenchmarkCollectorAdd(b *testing.B) {
	reg := NewRegistry()
	iters := reg.MustRegister("iterations", Counter, Default)
	dur := reg.MustRegister("iteration_duration", Trend, Time)
	ts, err := ParseThresholds(map[string][]Threshold{
		"iteration_duration":               ths("p(95)<100"),
		"iteration_duration{scenario:one}": ths("p(99)<200"),
	}, reg)
	if err != nil {
		b.Fatal(err)
	}
	tags := NewTags(map[string]string{"scenario": "one", "group": ""})
	b.Run("no-output", func(b *testing.B) {
		c := NewCollector(reg, ts)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			v := 1.0
			for pb.Next() {
				v += 0.5
				c.Add(Sample{Metric: iters, Tags: tags, Value: 1}, Sample{Metric: dur, Tags: tags, Value: v})
			}
		})
	})
	b.Run("with-discard-output", func(b *testing.B) {
		c := NewCollector(reg, ts, &recordingOutput{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			v := 1.0
			for pb.Next() {
				v += 0.5
				c.Add(Sample{Metric: iters, Tags: tags, Value: 1}, Sample{Metric: dur, Tags: tags, Value: v})
			}
		})
		_ = c.Close()
	})
}

func TestCollector_EvaluateRunningSkipsMetricsWithoutSamples(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	iters, _ := reg.Get("iterations")
	raw := map[string][]Threshold{
		"iterations":        {{Source: "count>0", AbortOnFail: true}},
		"checks":            {{Source: "rate>=0.9", AbortOnFail: true}},
		"http_req_duration": {{Source: "avg>1", AbortOnFail: true}},
		"vus":               {{Source: "value>0", AbortOnFail: true}},
	}
	c := NewCollector(reg, mustThresholds(t, reg, raw))
	failed, abort := c.EvaluateRunning(time.Second)
	assert.False(t, failed, "no metric has a sample yet")
	assert.False(t, abort)
	for _, r := range c.Results() {
		assert.True(t, r.NoSamples, r.Key)
	}

	// At the end, the empty Counter, Trend and Gauge measured 0 and fail;
	// the empty Rate is skipped.
	failed, _ = c.Evaluate(time.Second)
	assert.True(t, failed)
	assert.Equal(t, []string{"http_req_duration", "iterations", "vus"}, FailedKeys(c.Results(), false))

	// Once it has samples, the running evaluation judges it.
	c.Add(Sample{Metric: iters, Value: 0})
	failed, abort = c.EvaluateRunning(time.Second)
	assert.True(t, failed)
	assert.True(t, abort)
}

// flushCounter is an output that counts Flush calls.
type flushCounter struct {
	mu      sync.Mutex
	samples int
	flushes int
}

func (f *flushCounter) AddSamples(s []Sample) { f.mu.Lock(); f.samples += len(s); f.mu.Unlock() }
func (f *flushCounter) Close() error          { return nil }
func (f *flushCounter) Flush() error          { f.mu.Lock(); f.flushes++; f.mu.Unlock(); return nil }

func TestCollector_FlushDeliversAndFlushesOutputs(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	iters, _ := reg.Get("iterations")
	out := &flushCounter{}
	c := NewCollector(reg, nil, out)
	c.Add(Sample{Metric: iters, Value: 1}, Sample{Metric: iters, Value: 1})
	c.Flush()
	out.mu.Lock()
	assert.Equal(t, 2, out.samples)
	assert.Equal(t, 1, out.flushes)
	out.mu.Unlock()
	require.NoError(t, c.Close())
	c.Flush() // after Close: nothing, no panic
	assert.Equal(t, 1, out.flushes)
}
