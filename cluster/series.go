package cluster

import "fmt"

// The cluster records its occupancy and outcomes over modeled time itself,
// on the loop, so a report or an export does not depend on sampling from
// VUs. Memory is bounded: points are fixed-interval buckets of modeled
// time, and when there are more than maxSeriesPoints, neighbours merge and
// the interval doubles.

// maxSeriesPoints bounds the points a Series keeps.
const maxSeriesPoints = 512

// seriesStartMs is the first bucket width, in modeled ms.
const seriesStartMs = 50.0

// Series is a cluster's history in modeled time.
type Series struct {
	// IntervalMs is the width of each point's bucket, in modeled ms.
	IntervalMs float64 `json:"interval_ms"`
	// Workers names the workers, in the order of each point's Workers;
	// a worker with dp_size n is named n times, once per rank, with its
	// rank at the same index of DPRanks.
	Workers []string      `json:"workers"`
	DPRanks []int         `json:"dp_ranks"`
	Roles   []string      `json:"roles"`
	Points  []SeriesPoint `json:"points"`
}

// SeriesPoint is one bucket: the workers' occupancy at its end (held
// blocks: the most held during the bucket) and what ended during it.
type SeriesPoint struct {
	AtMs    float64       `json:"t_ms"`
	Workers []WorkerPoint `json:"workers"`
	// HeldBlocks is the most blocks held across the cluster at once
	// during the bucket: its maximum over the points is the run's peak.
	HeldBlocks      int    `json:"held_blocks"`
	Completed       uint64 `json:"completed"`
	Aborted         uint64 `json:"aborted"`
	Rejected        uint64 `json:"rejected"`
	Errored         uint64 `json:"errored"`
	PrefillRefusals uint64 `json:"prefill_refusals"`
	HoldAborts      uint64 `json:"hold_aborts"`
}

// WorkerPoint is one worker's occupancy in a SeriesPoint.
type WorkerPoint struct {
	Held     int `json:"held_blocks"`
	Active   int `json:"active_blocks"`
	Free     int `json:"free_blocks"`
	Reserved int `json:"reserved_blocks"`
	Running  int `json:"running"`
	Waiting  int `json:"waiting"`
}

type seriesRec struct {
	interval float64
	points   []SeriesPoint
	cur      []WorkerPoint // each worker's latest state
}

// bucket returns the point covering modeled time t, opening buckets up to
// it (they carry the workers' state forward).
func (s *seriesRec) bucket(t float64) *SeriesPoint {
	if s.interval == 0 {
		s.interval = seriesStartMs
	}
	for {
		if n := len(s.points); n > 0 && t < s.points[n-1].AtMs+s.interval {
			return &s.points[n-1]
		}
		if len(s.points) >= maxSeriesPoints {
			s.halve()
			continue
		}
		p := SeriesPoint{Workers: append([]WorkerPoint(nil), s.cur...)}
		if n := len(s.points); n > 0 {
			p.AtMs = s.points[n-1].AtMs + s.interval
		} else {
			p.AtMs = float64(int64(t/s.interval)) * s.interval
		}
		s.points = append(s.points, p)
	}
}

// halve merges neighbouring points and doubles the interval.
func (s *seriesRec) halve() {
	out := s.points[:0]
	for i := 0; i < len(s.points); i += 2 {
		p := s.points[i]
		if i+1 < len(s.points) {
			q := s.points[i+1]
			for w := range p.Workers {
				held := max(p.Workers[w].Held, q.Workers[w].Held)
				p.Workers[w] = q.Workers[w]
				p.Workers[w].Held = held
			}
			p.HeldBlocks = max(p.HeldBlocks, q.HeldBlocks)
			p.Completed += q.Completed
			p.Aborted += q.Aborted
			p.Rejected += q.Rejected
			p.Errored += q.Errored
			p.PrefillRefusals += q.PrefillRefusals
			p.HoldAborts += q.HoldAborts
		}
		out = append(out, p)
	}
	clear(s.points[len(out):])
	s.points = out
	s.interval *= 2
}

func (s *seriesRec) observe(t float64, total, w int, held, active, free, reserved, running, waiting int) {
	p := s.bucket(t)
	p.HeldBlocks = max(p.HeldBlocks, total)
	now := WorkerPoint{Held: held, Active: active, Free: free, Reserved: reserved, Running: running, Waiting: waiting}
	s.cur[w] = now
	// A bucket's held figure is its peak; the others are its last state.
	now.Held = max(p.Workers[w].Held, held)
	p.Workers[w] = now
}

func (s *seriesRec) ended(t float64, res *Result) {
	p := s.bucket(t)
	switch res.Outcome {
	case OutcomeCompleted:
		p.Completed++
	case OutcomeAborted:
		p.Aborted++
	case OutcomeRejected:
		p.Rejected++
		if res.PrefillRejected {
			p.PrefillRefusals++
		}
	default:
		p.Errored++
	}
}

func (s *seriesRec) holdAborted(t float64) { s.bucket(t).HoldAborts++ }

// Series returns the cluster's history so far.
func (c *Cluster) Series() Series {
	var out Series
	c.query(func() { out = c.seriesNow() })
	return out
}

// seriesNow copies the history; on the loop.
func (c *Cluster) seriesNow() Series {
	var out Series
	{
		out.IntervalMs = c.series.interval
		for _, w := range c.workers {
			out.Workers = append(out.Workers, w.name)
			out.DPRanks = append(out.DPRanks, w.rank)
			out.Roles = append(out.Roles, string(w.role))
		}
		out.Points = make([]SeriesPoint, len(c.series.points))
		for i, p := range c.series.points {
			p.Workers = append([]WorkerPoint(nil), p.Workers...)
			out.Points[i] = p
		}
	}
	return out
}

// Label names the i-th worker of each point: its worker's name, with its
// data-parallel rank when that worker has several ("prefill-0 dp_rank 2").
func (s *Series) Label(i int) string {
	name := s.Workers[i]
	if i >= len(s.DPRanks) {
		return name
	}
	for j, n := range s.Workers {
		if n == name && j < len(s.DPRanks) && s.DPRanks[j] > 0 {
			return fmt.Sprintf("%s dp_rank %d", name, s.DPRanks[i])
		}
	}
	return name
}
