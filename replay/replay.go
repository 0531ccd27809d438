package replay

import (
	"errors"
	"fmt"
	"io"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/internal/idtab"
	"github.com/kvstrand/mocker/kv"
)

// DefaultBlockSize is the trace block size hash ids stand for when
// Options.BlockSize is 0: 512 tokens, as the published Mooncake traces use.
const DefaultBlockSize = 512

// Options tune Run.
type Options struct {
	// BlockSize is the tokens one hash id stands for (default
	// DefaultBlockSize); the cluster's engine block_size may differ.
	BlockSize int
	// RateScale divides the arrival times of requests outside sessions
	// and of sessions' first turns: 2 sends the trace twice as fast.
	// Default 1. Session delays are not scaled: they are think time.
	RateScale float64
	// MaxRequests stops sending after this many requests (turns count);
	// 0 sends all.
	MaxRequests int
	// DurationMs stops sending requests that would arrive at or after
	// this modeled time (after RateScale); 0 sends all. Requests in flight
	// then finish.
	DurationMs float64
	// SLO bounds a request's latencies for goodput; zero fields do not
	// bound.
	SLO SLO
	// OnRequest, when set, receives every request as it ends, in the
	// order requests end, on the cluster's loop.
	OnRequest func(RequestEnd)
	// Progress, when set, is called on the cluster's loop every
	// ProgressEvery ended requests with the count and the modeled time.
	Progress func(ended uint64, nowMs float64)
}

// RequestEnd is one request of the trace as it ended.
type RequestEnd struct {
	// Line is the trace row the request came from; Session its session
	// ("" for none).
	Line    int
	Session string
	// ArrivedMs and EndedMs are modeled times.
	ArrivedMs, EndedMs float64
	Result             cluster.Result
}

// ProgressEvery is how many ended requests pass between calls of
// Options.Progress.
const ProgressEvery = 4096

// Output is what Run returns: the summary and the cluster's run.
type Output struct {
	Summary Summary
	Run     cluster.StreamRun
	// Figures keeps the distributions behind the summary, for the report.
	Figures *Figures
	// Plan is the cluster's config as the run resolved it (its time
	// scale, for the report).
	Plan cluster.Plan
}

// Run replays the trace read by tr through a cluster built from cfg, on
// virtual time: requests outside sessions and the first turn of each
// session arrive at their timestamps (relative to the trace's first, over
// RateScale); a session's later turn arrives its delay after the turn
// before it ended (its delay field, or else the gap between the two
// turns' timestamps, or else 0). Memory follows the requests in flight
// and the sessions' turns read ahead, not the trace's length. A trace
// error (a bad row, timestamps going backwards) stops the run and is
// returned once the requests in flight have ended.
func Run(cfg cluster.Config, tr *Reader, opts Options) (Output, error) {
	plan, err := cfg.Plan()
	if err != nil {
		return Output{}, err
	}
	return runPlan(plan, tr, opts)
}

// runPlan is Run on a config already resolved.
func runPlan(plan cluster.Plan, tr *Reader, opts Options) (Output, error) {
	src, err := NewSource(tr, opts)
	if err != nil {
		return Output{}, err
	}
	p := src.p
	p.bs = plan.BlockSize()
	run, err := plan.RunStream(p.next, cluster.StreamOptions{OnResult: p.ended})
	if err != nil {
		return Output{}, err
	}
	if p.err != nil {
		return Output{}, p.err
	}
	out := Output{Run: run, Figures: p.figs, Plan: plan}
	out.Summary = p.figs.summary(run.Stats, p.firstAt, len(p.sessions), p.late)
	return out, nil
}

// checked is opts with its defaults applied, or an error naming the option
// at fault.
func (opts Options) checked() (Options, error) {
	if opts.BlockSize == 0 {
		opts.BlockSize = DefaultBlockSize
	}
	if opts.BlockSize < 1 {
		return opts, fmt.Errorf("trace block size: want ≥ 1 tokens, got %d", opts.BlockSize)
	}
	if opts.RateScale == 0 {
		opts.RateScale = 1
	}
	if !(opts.RateScale > 0) || opts.RateScale > 1e9 {
		return opts, fmt.Errorf("rate scale: want a number > 0, got %g", opts.RateScale)
	}
	if opts.MaxRequests < 0 {
		return opts, fmt.Errorf("max requests: want ≥ 0 (0: all), got %d", opts.MaxRequests)
	}
	if !(opts.DurationMs >= 0) {
		return opts, fmt.Errorf("duration: want ≥ 0 ms (0: the whole trace), got %g", opts.DurationMs)
	}
	return opts, nil
}

// turn is a request read from the trace and not yet ended.
type turn struct {
	session *session
	input   int
	output  int
	ids     []uint64 // a queued turn's own copy
	delayMs float64
	line    int
	name    string  // its session's
	at      float64 // when it arrives
}

// session is a session's state: its turns read ahead, and whether one is
// out (sent, or due to be).
type session struct {
	queue  []turn
	out    bool
	lastTs float64 // the last turn's timestamp, for a delay not given
	hasTs  bool
}

// player feeds the trace to the cluster and collects the results.
type player struct {
	tr       *Reader
	opts     Options
	sessions map[string]*session
	inflight idtab.Table[turn] // by key: keys count up, and end in about that order
	figs     *Figures
	bufs     [2][]uint32  // the arrival read ahead and the one before it
	hbufs    [2]kv.Hashes // their block hashes
	// bs is the cluster's block size, when the player hashes prompts for
	// it (0: the cluster hashes them); memo and block serve that.
	bs      int
	memo    kv.RunMemo
	block   []uint32
	key     int
	sent    int
	rows    int
	late    uint64
	firstTs float64 // the trace's first timestamp: time 0
	firstAt float64 // the first arrival, modeled ms
	started bool
	lastAt  float64 // the last arrival handed out, modeled ms
	lastRow int     // its line
	lastTs  float64 // its timestamp
	stopped bool
	err     error
}

// next is the cluster's StreamSource: the next request outside a session
// or first turn, queueing the sessions' later turns it reads on the way.
func (p *player) next() (cluster.StreamArrival, bool) {
	for !p.stopped {
		if p.opts.MaxRequests > 0 && p.sent >= p.opts.MaxRequests {
			break
		}
		rec, err := p.tr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.err = err
			} else if p.rows == 0 {
				p.err = ErrEmpty
			}
			break
		}
		p.rows++
		t := turn{input: rec.InputLength, output: rec.OutputLength, ids: rec.HashIDs, line: rec.Line, delayMs: rec.DelayMs}
		if rec.Session != "" {
			s := p.sessions[rec.Session]
			if s != nil {
				if !rec.HasDelay {
					t.delayMs = 0
					if s.hasTs && rec.HasTimestamp && rec.TimestampMs > s.lastTs {
						t.delayMs = rec.TimestampMs - s.lastTs
					}
				}
				s.lastTs, s.hasTs = rec.TimestampMs, rec.HasTimestamp
				if s.out || len(s.queue) > 0 {
					t.ids = append([]uint64(nil), rec.HashIDs...)
					t.session, t.name = s, rec.Session
					s.queue = append(s.queue, t)
					continue
				}
				// Read only after the turn before it ended: it is late,
				// and goes now.
				p.late++
				t.session, t.name = s, rec.Session
				s.out = true
				return p.arrival(t, p.lastAt), true
			}
			if !rec.HasTimestamp {
				p.err = &ParseError{Line: rec.Line, Field: "timestamp", Err: errors.New("missing: a session's first turn needs its arrival time")}
				break
			}
			s = &session{out: true, lastTs: rec.TimestampMs, hasTs: true}
			p.sessions[rec.Session] = s
			t.session = s
			t.name = rec.Session
		}
		if !p.started {
			p.started, p.firstTs = true, rec.TimestampMs
		} else if rec.TimestampMs < p.lastTs {
			p.err = &ParseError{Line: rec.Line, Field: "timestamp", Err: fmt.Errorf("%g is before line %d's %g: requests must be in time order", rec.TimestampMs, p.lastRow, p.lastTs)}
			break
		}
		p.lastTs, p.lastRow = rec.TimestampMs, rec.Line
		at := (rec.TimestampMs - p.firstTs) / p.opts.RateScale
		if p.opts.DurationMs > 0 && at >= p.opts.DurationMs {
			break
		}
		if p.sent == 0 {
			p.firstAt = at
		}
		p.lastAt = at
		return p.arrival(t, at), true
	}
	p.stopped = true
	return cluster.StreamArrival{}, false
}

// arrival makes t a request arriving at at, its tokens in the buffer
// the arrival before the last is done with.
func (p *player) arrival(t turn, at float64) cluster.StreamArrival {
	key := p.key
	p.key++
	p.sent++
	t.at = at
	return cluster.StreamArrival{Key: key, Arrival: cluster.Arrival{AtMs: at, Request: p.request(t, key, &p.bufs[key&1], &p.hbufs[key&1])}}
}

// request is t's request, its tokens appended to *buf (reused) when the
// trace names its blocks, and their block hashes put in *hs when the
// player hashes prompts; the cluster draws them otherwise.
func (p *player) request(t turn, key int, buf *[]uint32, hs *kv.Hashes) cluster.Request {
	p.inflight.Set(uint64(key), turn{session: t.session, input: t.input, output: t.output, line: t.line, name: t.name, at: t.at})
	req := cluster.Request{PromptTokens: t.input, MaxTokens: t.output}
	if len(t.ids) > 0 {
		*buf = AppendTokens((*buf)[:0], t.ids, t.input, p.opts.BlockSize, uint64(key))
		req.Tokens = *buf
		if p.bs > 0 {
			p.hash(hs, req.Tokens, t.ids)
			req.Hashes = hs
		}
	}
	return req
}

// hash puts in h the block hashes of tokens, a prompt AppendTokens built
// from ids, in blocks of the cluster's size: when the trace's blocks are
// whole blocks of the cluster's, those of the blocks a hash id's tokens
// fill come from the memo, which hashes a run of them once; the rest from
// the tokens (through the memo too when the sizes do not fit).
func (p *player) hash(h *kv.Hashes, tokens []uint32, ids []uint64) {
	bs, tb := p.bs, p.opts.BlockSize
	locals, seqs := h.Locals[:0], h.Seqs[:0]
	if tb%bs == 0 {
		if len(p.block) != bs {
			p.block = make([]uint32, bs)
		}
		for k, id := range ids {
			// The whole blocks of the id's tokens (all of them but for a
			// prompt that ends inside them); a block that runs on past
			// them is left to the tokens.
			n := min(tb, len(tokens)-k*tb) / bs
			if n <= 0 {
				break
			}
			tok := idToken(id)
			for i := range p.block {
				p.block[i] = tok
			}
			locals, seqs = p.memo.AppendRun(kv.HashTokens(p.block), n, locals, seqs)
			if n*bs < tb {
				break
			}
		}
	}
	h.BlockSize = bs
	if tb%bs == 0 {
		h.Locals, h.Seqs = kv.ExtendBlockHashes(tokens, bs, locals, seqs)
	} else {
		h.Locals, h.Seqs = p.memo.Extend(tokens, bs, locals, seqs)
	}
}

// ended is the cluster's OnResult: it records the result and sends the
// session's next turn, if one is queued.
func (p *player) ended(key int, now float64, res cluster.Result) (cluster.StreamArrival, bool) {
	t, _ := p.inflight.Get(uint64(key))
	p.inflight.Delete(uint64(key))
	p.figs.add(t.input, res)
	if p.opts.OnRequest != nil {
		p.opts.OnRequest(RequestEnd{Line: t.line, Session: t.name, ArrivedMs: t.at, EndedMs: now, Result: res})
	}
	if p.opts.Progress != nil && p.figs.ended%ProgressEvery == 0 {
		p.opts.Progress(p.figs.ended, now)
	}
	s := t.session
	if s == nil {
		return cluster.StreamArrival{}, false
	}
	if len(s.queue) == 0 || p.err != nil || (p.opts.MaxRequests > 0 && p.sent >= p.opts.MaxRequests) {
		s.out = false
		s.queue = nil
		return cluster.StreamArrival{}, false
	}
	nt := s.queue[0]
	s.queue[0] = turn{}
	s.queue = s.queue[1:]
	at := now + nt.delayMs
	if p.opts.DurationMs > 0 && at >= p.opts.DurationMs {
		s.out = false
		s.queue = nil
		return cluster.StreamArrival{}, false
	}
	key2 := p.key
	p.key++
	p.sent++
	var own []uint32 // a follow-up owns its tokens until it arrives
	nt.at = at
	return cluster.StreamArrival{Key: key2, Arrival: cluster.Arrival{AtMs: at, Request: p.request(nt, key2, &own, new(kv.Hashes))}}, true
}
