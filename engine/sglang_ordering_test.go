package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pdSim is a one-prefill, one-decode SGLang pair on a shared modeled clock,
// wired the way a cluster wires a handoff in either ordering.
type pdSim struct {
	t          *testing.T
	p, d       *Worker
	destFirst  bool
	now        float64
	reqs       map[uint64]Request
	arrivals   []Request
	interval   float64
	acts       []pdAct
	pr, dr     record
	transfers  map[uint64]Event // EventTransferStart per request on P
	reservedAt map[uint64]float64
}

type pdAct struct {
	at float64
	fn func(now float64)
}

func (s *pdSim) later(at float64, fn func(now float64)) { s.acts = append(s.acts, pdAct{at, fn}) }

func (s *pdSim) run() {
	for iter := 0; ; iter++ {
		require.Less(s.t, iter, 200000, "simulation never settled")
		// The earliest of: a scheduled reaction, an arrival, a worker wake.
		best, kind := 0.0, -1
		consider := func(at float64, k int) {
			if kind < 0 || at < best {
				best, kind = at, k
			}
		}
		ai := -1
		for i, a := range s.acts {
			if kind < 0 || a.at < best {
				best, kind, ai = a.at, 0, i
			}
		}
		if len(s.arrivals) > 0 {
			consider(float64(s.arrivals[0].ID)*s.interval, 1)
		}
		if at, ok := s.p.NextWake(); ok {
			consider(at, 2)
		}
		if at, ok := s.d.NextWake(); ok {
			consider(at, 3)
		}
		if kind < 0 {
			return
		}
		s.now = max(s.now, best)
		switch kind {
		case 0:
			a := s.acts[ai]
			s.acts = append(s.acts[:ai], s.acts[ai+1:]...)
			a.fn(s.now)
		case 1:
			req := s.arrivals[0]
			s.arrivals = s.arrivals[1:]
			s.reqs[req.ID] = req
			require.NoError(s.t, s.p.Submit(s.now, req, Hold))
			if s.destFirst {
				require.NoError(s.t, s.d.Reserve(s.now, req))
			}
		case 2:
			if out := s.p.Step(s.now); out != nil {
				s.pr.add(out)
				s.onPrefill(out)
			}
			checkWorker(s.t, s.p)
		case 3:
			if out := s.d.Step(s.now); out != nil {
				s.dr.add(out)
				s.onDecode(out)
			}
			checkWorker(s.t, s.d)
		}
	}
}

func (s *pdSim) onPrefill(out *Output) {
	at := max(s.now, out.End)
	for _, e := range out.Events {
		id := e.RequestID
		switch e.Kind {
		case EventHoldStarted:
			if !s.destFirst {
				s.later(at, func(now float64) { require.NoError(s.t, s.d.Reserve(now, s.reqs[id])) })
			}
		case EventTransferStart:
			s.transfers[id] = e
		case EventHoldReleased:
			if e.Outcome == Transferred {
				s.later(at, func(now float64) { require.True(s.t, s.d.Activate(now, id)) })
			} else {
				s.later(at, func(now float64) { s.d.CancelDestination(now, id) })
			}
		}
	}
	for _, rj := range out.Rejections {
		id := rj.RequestID
		s.later(at, func(now float64) { s.d.CancelDestination(now, id) })
	}
}

func (s *pdSim) onDecode(out *Output) {
	at := max(s.now, out.End)
	for _, e := range out.Events {
		if e.Kind != EventDecodeReserved {
			continue
		}
		id, missing := e.RequestID, e.MissingTokens
		s.reservedAt[id] = e.At
		tokens := TransferTokens(TransferFullPrompt, len(s.reqs[id].Tokens), missing)
		s.later(at, func(now float64) {
			if s.destFirst {
				if !s.p.DestinationReady(now, id, tokens) {
					s.d.CancelDestination(now, id)
				}
				return
			}
			if _, ok := s.p.StartTransfer(now, id, tokens); !ok {
				s.d.CancelDestination(now, id)
			}
		})
	}
}

// runPD drives n requests (32-token prompts, 40 output tokens, one every
// 10 ms) through a prefill worker with room to spare and a decode worker
// whose 24 pages fit one request at a time, so decode capacity is the
// bottleneck. Holds abort 100 ms after they start unless a transfer began.
func runPD(t *testing.T, optimistic bool, n int) *pdSim {
	abort := int64(100)
	bw, bpt := 10.0, 1_000_000 // 32 tokens take 3.2 ms
	common := func(a *Args) {
		a.KVTransferAbortTimeoutMs = &abort
		a.KVTransferBandwidth, a.KVBytesPerToken = &bw, &bpt
		a.SGLang.OptimisticPrefill = optimistic
	}
	p, err := New(sglangArgs(256, common, asPrefill), nil, 1)
	require.NoError(t, err)
	d, err := New(sglangArgs(24, common, func(a *Args) { a.WorkerType = WorkerDecode }), nil, 2)
	require.NoError(t, err)
	s := &pdSim{t: t, p: p, d: d, destFirst: !optimistic, reqs: map[uint64]Request{}, interval: 10,
		transfers: map[uint64]Event{}, reservedAt: map[uint64]float64{}}
	for i := range n {
		s.arrivals = append(s.arrivals, Request{ID: uint64(i), Tokens: seqTokens(uint32(1000*i), 32), MaxTokens: 40})
	}
	s.run()
	for _, w := range []*Worker{p, d} {
		m := w.Metrics()
		assert.Zero(t, m.ActiveBlocks)
		assert.Zero(t, m.HeldRequests)
		assert.Zero(t, m.ReservedRequests)
		assert.Zero(t, m.Waiting)
	}
	return s
}

func TestSGLang_DestinationFirstNeverStrands(t *testing.T) {
	const n = 12
	s := runPD(t, false, n)
	released := s.pr.eventsOf(EventHoldReleased)
	require.Len(t, released, n)
	for _, e := range released {
		assert.Equal(t, Transferred, e.Outcome, "request %d", e.RequestID)
		tr, ok := s.transfers[e.RequestID]
		require.True(t, ok)
		assert.Zero(t, tr.DurationMs, "the transfer starts the moment the prefill holds")
		assert.InDelta(t, 3.2, tr.DelayMs, 1e-9)
		assert.InDelta(t, tr.DelayMs, e.DurationMs, 1e-9, "request %d: held exactly as long as the transfer", e.RequestID)
	}
	for _, e := range s.pr.eventsOf(EventHoldStarted) {
		assert.LessOrEqual(t, s.reservedAt[e.RequestID], e.At, "request %d: decode reserved before the prefill held", e.RequestID)
	}
	assert.Empty(t, s.pr.rejections)
	assert.Len(t, s.dr.completions, n, "every request decoded")
}

func TestSGLang_OptimisticPrefillStrandsAndAborts(t *testing.T) {
	const n = 12
	s := runPD(t, true, n)
	released := s.pr.eventsOf(EventHoldReleased)
	require.Len(t, released, n)
	aborted, long := 0, 0
	for _, e := range released {
		if e.Outcome == Aborted {
			aborted++
			assert.Equal(t, EndAbortTimeout, e.Reason)
			assert.InDelta(t, 100, e.DurationMs, 1e-9, "aborted 100 ms after the hold began")
		}
		if e.DurationMs > 3.2+1e-9 {
			long++
		}
	}
	assert.Positive(t, aborted, "held KV waited for a decode side that was full")
	assert.Positive(t, long, "holds outlast the transfer")
	assert.Len(t, s.dr.completions, n-aborted, "aborted handoffs never decode")
	assert.Len(t, s.dr.eventsOf(EventDestinationCancelled), aborted, "each abort cancels its destination")
}
