package harness

import (
	"fmt"
	"math/big"
	"time"

	"github.com/kvstrand/mocker/harness/options"
	"github.com/kvstrand/mocker/harness/schedule"
	"github.com/kvstrand/mocker/harness/segment"
)

// applySegment narrows the scenarios to this process's execution
// segment (Config.ExecutionSegment or options.executionSegment, within
// the sequence of Config.ExecutionSegmentSequence or
// options.executionSegmentSequence): each scenario keeps the segment's
// share of its VUs and iterations, and an arrival-rate scenario the
// segment's share of the whole test's iteration starts, at their times.
// A scenario left with nothing to do in the segment is dropped.
//
// Two shares differ from k6's on purpose, so that the parts of a sequence
// always add up to one unsegmented run: a shared-iterations share with
// iterations but no VU runs them on one VU (k6 would skip them), and an
// arrival-rate share with starts but no VU may start one.
func (t *testRun) applySegment() error {
	segStr, seqStr := t.cfg.ExecutionSegment, t.cfg.ExecutionSegmentSequence
	if segStr == "" {
		segStr, _ = t.opts.Raw["executionSegment"].(string)
	}
	if seqStr == "" {
		seqStr, _ = t.opts.Raw["executionSegmentSequence"].(string)
	}
	if segStr == "" && seqStr == "" {
		return nil
	}
	seg := segment.Segment{From: new(big.Rat), To: big.NewRat(1, 1)}
	var err error
	if segStr != "" {
		if seg, err = segment.Parse(segStr); err != nil {
			return exitErrorf(ExitInvalidConfig, "%v", err)
		}
	}
	var seq []*big.Rat
	if seqStr != "" {
		if seq, err = segment.ParseSequence(seqStr); err != nil {
			return exitErrorf(ExitInvalidConfig, "%v", err)
		}
	}
	st, err := segment.New(seg, seq)
	if err != nil {
		return exitErrorf(ExitInvalidConfig, "%v", err)
	}
	if st == nil {
		return nil
	}
	t.stripe = st
	kept := t.opts.Scenarios[:0]
	for _, sc := range t.opts.Scenarios {
		if scaleScenario(sc, st) {
			kept = append(kept, sc)
		}
	}
	t.opts.Scenarios = kept
	t.logger.Info(fmt.Sprintf("execution segment %s: %d of the test's scenarios have work in it", st.Segment(), len(kept)))
	return nil
}

// scaleScenario gives sc the stripe's share; false means no work is left.
func scaleScenario(sc *options.Scenario, st *segment.Stripe) bool {
	switch sc.Executor {
	case options.ExecSharedIterations:
		sc.VUs, sc.Iterations = st.Scale(sc.VUs), st.Scale(sc.Iterations)
		if sc.Iterations > 0 && sc.VUs == 0 {
			sc.VUs = 1
		}
		sc.VUs = min(sc.VUs, sc.Iterations)
		return sc.Iterations > 0
	case options.ExecPerVUIterations, options.ExecConstantVUs:
		sc.VUs = st.Scale(sc.VUs)
		return sc.VUs > 0
	case options.ExecRampingVUs:
		sc.StartVUs = st.Scale(sc.StartVUs)
		work := sc.StartVUs > 0
		stages := make([]options.Stage, len(sc.Stages))
		for i, s := range sc.Stages {
			stages[i] = options.Stage{Duration: s.Duration, Target: st.Scale(s.Target)}
			work = work || stages[i].Target > 0
		}
		sc.Stages = stages
		return work
	case options.ExecConstantArrival, options.ExecRampingArrivalRate:
		sc.PreAllocatedVUs, sc.MaxVUs = st.Scale(sc.PreAllocatedVUs), st.Scale(sc.MaxVUs)
		if sc.MaxVUs == 0 {
			sc.MaxVUs = 1
		}
		return true
	}
	return true
}

// arrivalPlan yields an arrival-rate scenario's start offsets.
type arrivalPlan interface {
	Next() (time.Duration, bool)
}

// arrivals is the scenario's plan of starts: the whole test's, or the
// execution segment's share of them.
func (s *scenarioRun) arrivals() arrivalPlan {
	all := schedule.NewArrivals(s.cfg)
	if s.t.stripe == nil {
		return all
	}
	return &stripedArrivals{all: all, st: s.t.stripe}
}

// stripedArrivals keeps the starts whose index is the segment's.
type stripedArrivals struct {
	all *schedule.Arrivals
	st  *segment.Stripe
	k   int64
}

func (a *stripedArrivals) Next() (time.Duration, bool) {
	for {
		off, ok := a.all.Next()
		if !ok {
			return 0, false
		}
		k := a.k
		a.k++
		if a.st.Has(k) {
			return off, true
		}
	}
}
