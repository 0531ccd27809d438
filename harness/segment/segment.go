// Package segment splits one test between several `mocker run`
// processes the way k6's execution segments do: process i of n runs the
// segment [from, to) of a sequence of segments that covers [0, 1), and
// gets that share of every scenario's VUs, iterations and arrival-rate
// starts.
//
// Shares are handed out by striping, not by cutting: the indices
// 0, 1, 2... of a scenario's VUs (or iterations, or starts) are dealt to
// the segments of the sequence in a cycle of L indices, L being the least
// common denominator of the segments' lengths, so that a segment of
// length f gets f·L indices of each cycle, spread over it. Index i goes
// to the first segment, largest first (then in sequence order), that has
// had fewer indices than its share of the first i. The parts of a
// sequence then always add up to the whole, whatever the count, and each
// process's share of a small count is as even as it can be.
package segment

import (
	"fmt"
	"math/big"
	"sort"
	"strings"
)

// Segment is [From, To) of the unit interval.
type Segment struct{ From, To *big.Rat }

// String is the segment as the flag takes it, e.g. "1/3:2/3".
func (s Segment) String() string { return s.From.RatString() + ":" + s.To.RatString() }

// parseRat reads "1/3", "0.25", "25%" or "1".
func parseRat(s string) (*big.Rat, error) {
	s = strings.TrimSpace(s)
	r := new(big.Rat)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		if _, ok := r.SetString(p); !ok {
			return nil, fmt.Errorf("%q is not a percentage", s)
		}
		return r.Quo(r, big.NewRat(100, 1)), nil
	}
	if _, ok := r.SetString(s); !ok {
		return nil, fmt.Errorf("%q is not a fraction such as 1/3, 0.25 or 25%%", s)
	}
	return r, nil
}

func inUnit(r *big.Rat) bool { return r.Sign() >= 0 && r.Cmp(big.NewRat(1, 1)) <= 0 }

// Parse reads a segment, "from:to" or "to" (from 0), e.g. "0:1/3",
// "1/3:2/3", "50%:100%".
func Parse(s string) (Segment, error) {
	fromS, toS, found := strings.Cut(s, ":")
	if !found {
		fromS, toS = "0", s
	}
	from, err := parseRat(fromS)
	if err != nil {
		return Segment{}, fmt.Errorf("execution segment %q: %w", s, err)
	}
	to, err := parseRat(toS)
	if err != nil {
		return Segment{}, fmt.Errorf("execution segment %q: %w", s, err)
	}
	if !inUnit(from) || !inUnit(to) || from.Cmp(to) >= 0 {
		return Segment{}, fmt.Errorf("execution segment %q: want 0 ≤ from < to ≤ 1", s)
	}
	return Segment{From: from, To: to}, nil
}

// ParseSequence reads a sequence of boundaries, e.g. "0,1/3,2/3,1": each
// pair of neighbours is a segment. It must start at 0, end at 1 and rise.
func ParseSequence(s string) ([]*big.Rat, error) {
	var out []*big.Rat
	for _, part := range strings.Split(s, ",") {
		r, err := parseRat(part)
		if err != nil {
			return nil, fmt.Errorf("execution segment sequence %q: %w", s, err)
		}
		if !inUnit(r) {
			return nil, fmt.Errorf("execution segment sequence %q: %s is outside [0, 1]", s, r.RatString())
		}
		if n := len(out); n > 0 && out[n-1].Cmp(r) >= 0 {
			return nil, fmt.Errorf("execution segment sequence %q: the boundaries must rise (%s after %s)", s, r.RatString(), out[n-1].RatString())
		}
		out = append(out, r)
	}
	if len(out) < 2 || out[0].Sign() != 0 || out[len(out)-1].Cmp(big.NewRat(1, 1)) != 0 {
		return nil, fmt.Errorf("execution segment sequence %q: want boundaries from 0 to 1, such as 0,1/3,2/3,1", s)
	}
	return out, nil
}

// Stripe is one segment's share of indices. The zero of *Stripe (nil)
// is the whole test.
type Stripe struct {
	cycle int64   // L: indices per cycle
	mine  []int64 // the segment's indices within a cycle, ascending
	seg   Segment
}

// New returns the stripe of seg within the sequence of boundaries seq
// (nil: the segments [0, from), seg and [to, 1), as k6 assumes without a
// sequence). The whole interval gives nil, which keeps every index.
func New(seg Segment, seq []*big.Rat) (*Stripe, error) {
	one := big.NewRat(1, 1)
	if seg.From.Sign() == 0 && seg.To.Cmp(one) == 0 && len(seq) == 0 {
		return nil, nil
	}
	if len(seq) == 0 {
		seq = []*big.Rat{new(big.Rat)}
		if seg.From.Sign() > 0 {
			seq = append(seq, seg.From)
		}
		seq = append(seq, seg.To)
		if seg.To.Cmp(one) < 0 {
			seq = append(seq, one)
		}
	}
	idx := -1
	for i := 0; i+1 < len(seq); i++ {
		if seq[i].Cmp(seg.From) == 0 && seq[i+1].Cmp(seg.To) == 0 {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("execution segment %s is not one of the sequence's segments", seg)
	}
	n := len(seq) - 1
	lengths := make([]*big.Rat, n)
	cycle := big.NewInt(1)
	for i := range n {
		lengths[i] = new(big.Rat).Sub(seq[i+1], seq[i])
		d := lengths[i].Denom()
		g := new(big.Int).GCD(nil, nil, cycle, d)
		cycle.Mul(cycle, new(big.Int).Quo(d, g))
	}
	if !cycle.IsInt64() || cycle.Int64() > 1<<20 {
		return nil, fmt.Errorf("execution segment sequence: the segments' common denominator %s is too large (at most %d)", cycle, 1<<20)
	}
	L := cycle.Int64()
	share := make([]int64, n) // indices per cycle
	for i, l := range lengths {
		share[i] = new(big.Int).Quo(new(big.Int).Mul(l.Num(), cycle), l.Denom()).Int64()
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lengths[order[a]].Cmp(lengths[order[b]]) > 0 })
	had := make([]int64, n)
	st := &Stripe{cycle: L, seg: seg}
	for i := range L {
		for _, s := range order {
			// s is behind when had/share < (i+1)/L, i.e. had·L < (i+1)·share.
			if had[s]*L < (i+1)*share[s] {
				had[s]++
				if s == idx {
					st.mine = append(st.mine, i)
				}
				break
			}
		}
	}
	return st, nil
}

// Segment is the stripe's segment.
func (s *Stripe) Segment() Segment { return s.seg }

// Scale is the segment's share of n things: how many of the indices
// 0..n-1 are its own.
func (s *Stripe) Scale(n int64) int64 {
	if s == nil || n <= 0 {
		return max(n, 0)
	}
	full, rest := n/s.cycle, n%s.cycle
	k := sort.Search(len(s.mine), func(i int) bool { return s.mine[i] >= rest })
	return full*int64(len(s.mine)) + int64(k)
}

// Has reports whether index i is the segment's own.
func (s *Stripe) Has(i int64) bool {
	if s == nil {
		return true
	}
	r := i % s.cycle
	k := sort.Search(len(s.mine), func(j int) bool { return s.mine[j] >= r })
	return k < len(s.mine) && s.mine[k] == r
}
