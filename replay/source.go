package replay

import "github.com/kvstrand/mocker/cluster"

// Source is a trace's schedule for a caller that drives a cluster itself
// rather than through Run: the k6/x/mocker plugin plays a trace into a
// cluster on a script's virtual clock with it. It is the schedule Run
// follows, the same code: Next gives the requests outside sessions and the
// sessions' first turns in time order, and Ended, told that a request
// ended, gives its session's next turn. Arrival times are modeled ms from
// the trace's first request, after RateScale; MaxRequests and DurationMs
// bound what is handed out; OnRequest and Progress are called from Ended.
// A Source is not safe for concurrent use.
type Source struct{ p *player }

// NewSource schedules the trace tr reads with opts (SLO is not used).
func NewSource(tr *Reader, opts Options) (*Source, error) {
	opts, err := opts.checked()
	if err != nil {
		return nil, err
	}
	return &Source{p: &player{tr: tr, opts: opts, sessions: map[string]*session{}, figs: newFigures(opts.SLO)}}, nil
}

// Next is the next arrival read from the trace, with a key of its own
// (the keys count up from 0 across Next and Ended); ok false once the
// trace is done or bounded, or at its first error (Err). The arrival's
// tokens are the Source's until the call of Next after the next one.
func (s *Source) Next() (a cluster.StreamArrival, ok bool) { return s.p.next() }

// Ended records that the request of key ended at modeled time nowMs with
// res, and gives its session's next turn, if it has one still to send:
// its delay after nowMs. The follow-up owns its tokens.
func (s *Source) Ended(key int, nowMs float64, res cluster.Result) (next cluster.StreamArrival, ok bool) {
	return s.p.ended(key, nowMs, res)
}

// Err is the trace error that ended Next early: a row the reader refused
// (a ParseError naming line and field), timestamps going backwards, or
// ErrEmpty; nil when the trace was read to its end or bound.
func (s *Source) Err() error { return s.p.err }
