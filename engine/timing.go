package engine

import "github.com/kvstrand/mocker/perf"

// timingModel is the model a scheduler built from args times its passes
// with, given the model its caller passed (nil: none). A fixed timing_model
// replaces the default polynomial a caller passes when no profile is set;
// dynamo_compat unclamps the polynomial's utilisation, as Dynamo main
// computes it.
func timingModel(args Args, given perf.Model) perf.Model {
	if tm := args.TimingModel; tm != nil && tm.Type == TimingFixed && tm.PrefillMs != nil && tm.DecodeMs != nil {
		return perf.Fixed{Prefill: *tm.PrefillMs, Decode: *tm.DecodeMs}
	}
	if given == nil {
		given = perf.Polynomial{}
	}
	if p, ok := given.(perf.Polynomial); ok && args.DynamoCompat {
		p.Unclamped = true
		return p
	}
	return given
}

// meanLen is a batch's mean length for the timing model: Dynamo passes
// usize means, so under dynamo_compat the mean is rounded down as its
// integer division does; mocker keeps the fraction.
func meanLen(sum float64, n int, compat bool) float64 {
	m := sum / float64(n)
	if compat {
		return float64(int64(m))
	}
	return m
}
