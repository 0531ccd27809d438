package metrics

import "math"

// The histogram buckets a positive float64 by its top bits: the 11 exponent
// bits plus the first histSubBits mantissa bits. Every power-of-two octave is
// split into 2^histSubBits equal-width buckets, so a bucket is at most
// 1/128 of its lower bound wide and any point in it (e.g. the mean of the
// values that fell in it) is within 0.79% of every value in it. The mapping is monotonic in the value, so walking buckets
// in index order walks values in order.
const (
	histSubBits  = 7
	histSubCount = 1 << histSubBits
	histShift    = 52 - histSubBits
)

// Histogram is a log-linear histogram of float64 values with exact count,
// sum, min and max. Memory is one 2 KiB chunk per power of two actually seen
// (per sign), independent of the number of values: sub-microsecond to
// multi-hour latencies in milliseconds span about 45 octaves, i.e. ~90 KiB
// at worst, and a typical latency trend touches 10 to 20 octaves.
//
// Zero is counted exactly; negative values go to a mirrored histogram of
// their magnitudes, so they get the same relative error. Percentiles are
// exact at p(0) (min) and p(100) (max) and otherwise within 0.8% relative
// error of the interpolated order statistic when all values have the same
// sign; near a sign change the relative error is not bounded (the true
// value may be ~0). Subnormal values (below ~2.2e-308) lose the bound too.
//
// A Histogram is not safe for concurrent use; the Collector guards it.
type Histogram struct {
	pos, neg histBuckets
	zeros    uint64
	count    uint64
	sum      float64
	min, max float64
}

type histBuckets struct {
	base   int // exponent chunk index of chunks[0]
	chunks []*histChunk
	n      uint64
}

// histChunk is one octave. Keeping each bucket's sum as well as its count
// lets a percentile report the mean of the values in its bucket rather than
// the bucket's midpoint: still within the bucket (so the error bound holds),
// and exact when a bucket only ever saw one distinct value, as with
// whole-millisecond timings.
type histChunk struct {
	counts [histSubCount]uint64
	sums   [histSubCount]float64
}

func (b *histBuckets) add(mag float64) {
	k := math.Float64bits(mag) >> histShift
	c := int(k >> histSubBits)
	i := k & (histSubCount - 1)
	switch {
	case len(b.chunks) == 0:
		b.base = c
		b.chunks = append(b.chunks, nil)
	case c < b.base:
		grown := make([]*histChunk, len(b.chunks)+b.base-c)
		copy(grown[b.base-c:], b.chunks)
		b.chunks, b.base = grown, c
	case c >= b.base+len(b.chunks):
		b.chunks = append(b.chunks, make([]*histChunk, c-b.base-len(b.chunks)+1)...)
	}
	ch := b.chunks[c-b.base]
	if ch == nil {
		ch = new(histChunk)
		b.chunks[c-b.base] = ch
	}
	ch.counts[i]++
	ch.sums[i] += mag
	b.n++
}

// nth returns the mean of the bucket holding the rank-th smallest
// magnitude (0-based). rank must be below the bucket total.
func (b *histBuckets) nth(rank uint64) float64 {
	for _, ch := range b.chunks {
		if ch == nil {
			continue
		}
		for i, n := range ch.counts {
			if rank < n {
				return ch.sums[i] / float64(n)
			}
			rank -= n
		}
	}
	return math.NaN()
}

// Add records v. NaN is ignored; ±Inf is clamped to ±MaxFloat64.
func (h *Histogram) Add(v float64) {
	if math.IsNaN(v) {
		return
	}
	v = math.Max(-math.MaxFloat64, math.Min(math.MaxFloat64, v))
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if h.count == 0 || v > h.max {
		h.max = v
	}
	h.count++
	h.sum += v
	switch {
	case v > 0:
		h.pos.add(v)
	case v < 0:
		h.neg.add(-v)
	default:
		h.zeros++
	}
}

// Count returns the number of values added.
func (h *Histogram) Count() uint64 { return h.count }

// Sum returns the exact (float64) sum of the values.
func (h *Histogram) Sum() float64 { return h.sum }

// Min returns the smallest value, or 0 when empty (as k6 reports it).
func (h *Histogram) Min() float64 { return h.min }

// Max returns the largest value, or 0 when empty.
func (h *Histogram) Max() float64 { return h.max }

// Avg returns the mean, or 0 when empty.
func (h *Histogram) Avg() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / float64(h.count)
}

// valueAt approximates the rank-th smallest value (0-based).
func (h *Histogram) valueAt(rank uint64) float64 {
	switch {
	case rank == 0:
		return h.min
	case rank >= h.count-1:
		return h.max
	}
	negN := h.neg.n
	if rank < negN {
		// Smallest values are the most negative: walk magnitudes from the top.
		return -h.neg.nth(negN - 1 - rank)
	}
	rank -= negN
	if rank < h.zeros {
		return 0
	}
	return h.pos.nth(rank - h.zeros)
}

// Percentile returns p(N) for N in [0,100], interpolating between the two
// nearest order statistics at rank N/100·(count−1) as k6 does. It returns 0
// when empty.
func (h *Histogram) Percentile(n float64) float64 {
	if h.count == 0 {
		return 0
	}
	n = math.Max(0, math.Min(100, n))
	r := n / 100 * float64(h.count-1)
	lo := math.Floor(r)
	vlo := h.valueAt(uint64(lo))
	if r == lo {
		return clamp(vlo, h.min, h.max)
	}
	vhi := h.valueAt(uint64(lo) + 1)
	return clamp(vlo+(vhi-vlo)*(r-lo), h.min, h.max)
}

// Median returns p(50).
func (h *Histogram) Median() float64 { return h.Percentile(50) }

// chunks returns how many 2 KiB bucket chunks are allocated, for memory tests.
func (h *Histogram) chunks() int {
	n := 0
	for _, b := range []*histBuckets{&h.pos, &h.neg} {
		for _, ch := range b.chunks {
			if ch != nil {
				n++
			}
		}
	}
	return n
}

func clamp(v, lo, hi float64) float64 {
	return math.Max(lo, math.Min(hi, v))
}
