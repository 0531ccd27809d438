package metrics

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exactPercentile is k6's definition on the raw values: linear interpolation
// at rank p/100·(n−1) of the sorted slice.
func exactPercentile(sorted []float64, p float64) float64 {
	r := p / 100 * float64(len(sorted)-1)
	lo := math.Floor(r)
	i := int(lo)
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (sorted[i+1]-sorted[i])*(r-lo)
}

func TestHistogram_PercentilesWithinRelativeError(t *testing.T) {
	t.Parallel()
	dists := []struct {
		name string
		gen  func(r *rand.Rand) float64
	}{
		{"uniform ms", func(r *rand.Rand) float64 { return 1 + r.Float64()*999 }},
		{"lognormal latency", func(r *rand.Rand) float64 { return math.Exp(r.NormFloat64()*1.5 + 3) }},
		{"sub-ms to hours", func(r *rand.Rand) float64 { return math.Pow(10, -4+r.Float64()*11) }},
		{"exponential", func(r *rand.Rand) float64 { return r.ExpFloat64() * 50 }},
		{"few distinct", func(r *rand.Rand) float64 { return float64(1 + r.IntN(5)) }},
		{"all negative", func(r *rand.Rand) float64 { return -math.Exp(r.NormFloat64() * 2) }},
		{"tiny", func(r *rand.Rand) float64 { return 1e-9 * (1 + r.Float64()) }},
	}
	percentiles := []float64{0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100}
	for i, d := range dists {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(42, uint64(i)))
			var h Histogram
			vals := make([]float64, 200_000)
			sum := 0.0
			for j := range vals {
				vals[j] = d.gen(r)
				sum += vals[j]
				h.Add(vals[j])
			}
			sort.Float64s(vals)
			require.Equal(t, uint64(len(vals)), h.Count())
			assert.Equal(t, vals[0], h.Min())
			assert.Equal(t, vals[len(vals)-1], h.Max())
			assert.InEpsilon(t, sum/float64(len(vals)), h.Avg(), 1e-9)
			for _, p := range percentiles {
				want := exactPercentile(vals, p)
				got := h.Percentile(p)
				rel := math.Abs(got-want) / math.Abs(want)
				assert.LessOrEqual(t, rel, 0.008, "p(%v): got %v want %v", p, got, want)
			}
			assert.Equal(t, h.Percentile(50), h.Median())
		})
	}
}

func TestHistogram_ZerosAndMixedSigns(t *testing.T) {
	t.Parallel()
	var h Histogram
	vals := []float64{-5, -5, -1, 0, 0, 0, 0, 2, 8, 100}
	for _, v := range vals {
		h.Add(v)
	}
	assert.Equal(t, -5.0, h.Percentile(0))
	assert.Equal(t, 100.0, h.Percentile(100))
	assert.Equal(t, 0.0, h.Median(), "ranks 4 and 5 are zeros, counted exactly")
	assert.InEpsilon(t, -1, h.Percentile(100*2.0/9), 0.008, "rank 2 is -1")
	assert.InEpsilon(t, 8, h.Percentile(100*8.0/9), 0.008, "rank 8 is 8")
	assert.InDelta(t, 9.9, h.Avg(), 1e-12)
}

func TestHistogram_EmptyReportsZeros(t *testing.T) {
	t.Parallel()
	var h Histogram
	assert.Zero(t, h.Count())
	assert.Zero(t, h.Avg())
	assert.Zero(t, h.Min())
	assert.Zero(t, h.Max())
	assert.Zero(t, h.Percentile(95))
}

func TestHistogram_SingleValueIsExact(t *testing.T) {
	t.Parallel()
	var h Histogram
	h.Add(123.456)
	for _, p := range []float64{0, 50, 99.9, 100} {
		assert.Equal(t, 123.456, h.Percentile(p))
	}
}

func TestHistogram_ExtremesDoNotBreakIt(t *testing.T) {
	t.Parallel()
	var h Histogram
	for _, v := range []float64{math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1), math.NaN(), 1} {
		h.Add(v)
	}
	assert.Equal(t, uint64(5), h.Count(), "NaN is ignored")
	assert.Equal(t, math.MaxFloat64, h.Max())
	assert.Equal(t, -math.MaxFloat64, h.Min())
	for _, p := range []float64{0, 25, 50, 75, 100} {
		v := h.Percentile(p)
		assert.False(t, math.IsNaN(v) || math.IsInf(v, 0), "p(%v)=%v", p, v)
	}
}

// Bounded memory, checked structurally: ten decades of values allocate one
// chunk per octave seen, however many values there are.
func TestHistogram_MemoryBoundedByOctaves(t *testing.T) {
	t.Parallel()
	var h Histogram
	r := rand.New(rand.NewPCG(7, 7))
	for range 1_000_000 {
		h.Add(math.Pow(10, -3+r.Float64()*10)) // 1µs .. ~2.8h in ms
	}
	octaves := int(math.Ceil(10*math.Log2(10))) + 2
	assert.LessOrEqual(t, h.chunks(), octaves)
	assert.LessOrEqual(t, len(h.pos.chunks), octaves)
}

// Heap growth of a Trend sink fed a million samples stays under a megabyte.
func TestTrendSink_HeapDoesNotGrowWithSamples(t *testing.T) {
	s := newSink(Trend)
	r := rand.New(rand.NewPCG(1, 2))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 1_000_000 {
		s.add(math.Exp(r.NormFloat64()*2 + 3))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	assert.Less(t, grown, int64(1<<20), "heap grew %d bytes", grown)
	runtime.KeepAlive(s)
}

func BenchmarkTrend10M(b *testing.B) {
	const n = 10_000_000
	r := rand.New(rand.NewPCG(3, 4))
	vals := make([]float64, 1<<16)
	for i := range vals {
		vals[i] = math.Exp(r.NormFloat64()*2 + 3)
	}
	var heapAfter uint64
	var grown int64
	var nsPerAdd float64
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		s := newSink(Trend)
		for i := range n {
			s.add(vals[i&(len(vals)-1)])
		}
		b.StopTimer()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heapAfter = after.HeapInuse
		grown = int64(after.HeapAlloc) - int64(before.HeapAlloc)
		_ = s.hist.Percentile(99)
		runtime.KeepAlive(s)
		b.StartTimer()
	}
	nsPerAdd = float64(b.Elapsed().Nanoseconds()) / float64(b.N) / n
	b.ReportMetric(float64(heapAfter), "heap-inuse-bytes")
	b.ReportMetric(float64(grown), "trend-heap-bytes")
	b.ReportMetric(nsPerAdd, "ns/add")
}

// Small whole numbers each get a bucket of their own, and a bucket reports
// the mean of its values, so percentiles over them are exact.
func TestHistogram_SmallWholeNumbersAreExact(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	var h Histogram
	vals := make([]float64, 10_000)
	for i := range vals {
		vals[i] = float64(1 + r.IntN(120))
		h.Add(vals[i])
	}
	sort.Float64s(vals)
	for _, p := range []float64{10, 50, 90, 95, 99} {
		assert.InDelta(t, exactPercentile(vals, p), h.Percentile(p), 1e-9, "p(%v)", p)
	}
}
