package engine

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestHandoff_Conservation runs random schedules of submits, reserves,
// transfers, aborts, activations and destination cancels on a prefill and a
// decode worker in the virtual driver. After every step it checks block
// conservation on both workers; after a drain it checks that every request
// ended exactly once on each side, that every hold ended exactly once, and
// that nothing is held, reserved or active any more.
func TestHandoff_Conservation(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		pre, err := New(smallArgs(rapid.IntRange(6, 40).Draw(rt, "prefill_blocks"), func(a *Args) {
			a.WorkerType = WorkerPrefill
			a.MaxNumSeqs = intp(rapid.IntRange(1, 6).Draw(rt, "prefill_seqs"))
			a.EnableChunkedPrefill = rapid.Bool().Draw(rt, "chunked")
			a.MaxNumBatchedTokens = intp(rapid.IntRange(8, 64).Draw(rt, "budget"))
			if rapid.Bool().Draw(rt, "abort_set") {
				a.KVTransferAbortTimeoutMs = int64p(int64(rapid.IntRange(1, 200).Draw(rt, "abort_ms")))
			}
			a.HandoffSessionTimeoutMs = int64(rapid.IntRange(50, 400).Draw(rt, "session_ms"))
			a.KVBytesPerToken = intp(1_000_000)
			a.KVTransferBandwidth = float64p(rapid.Float64Range(0.05, 10).Draw(rt, "bandwidth"))
		}), nil, 1)
		if err != nil {
			rt.Fatal(err)
		}
		dec, err := New(smallArgs(rapid.IntRange(6, 40).Draw(rt, "decode_blocks"), func(a *Args) {
			a.WorkerType = WorkerDecode
			a.MaxNumSeqs = intp(rapid.IntRange(1, 6).Draw(rt, "decode_seqs"))
			a.PreemptionMode = rapid.SampledFrom([]PreemptionMode{PreemptLIFO, PreemptFIFO}).Draw(rt, "preempt")
		}), nil, 2)
		if err != nil {
			rt.Fatal(err)
		}
		const P, D = 0, 1
		v := NewVirtual(pre, dec)
		var rec [2]record
		check := func() {
			checkWorker(rt, pre)
			checkWorker(rt, dec)
		}
		v.OnOutput = func(w int, out *Output) {
			rec[w].add(out)
			for _, e := range out.Events {
				if e.At > v.Now() {
					rt.Fatalf("worker %d delivered %s at %.3f before its time %.3f", w, e.Kind, v.Now(), e.At)
				}
			}
			check()
		}
		v.OnInput = func(InputResult) { check() }

		prompts := map[uint64][]uint32{}
		reserved := map[uint64]bool{}
		ids := func(label string) uint64 {
			return uint64(rapid.IntRange(0, max(0, len(prompts)-1)).Draw(rt, label))
		}
		at := 0.0
		steps := rapid.IntRange(1, 50).Draw(rt, "steps")
		for range steps {
			at += rapid.Float64Range(0, 40).Draw(rt, "gap")
			switch rapid.IntRange(0, 6).Draw(rt, "action") {
			case 0, 1:
				id := uint64(len(prompts))
				prefix := seqTokens(uint32(1000*rapid.IntRange(0, 2).Draw(rt, "prefix")), rapid.IntRange(0, 12).Draw(rt, "plen"))
				tokens := slices.Concat(prefix, seqTokens(uint32(100000+100*id), rapid.IntRange(1, 16).Draw(rt, "tlen")))
				prompts[id] = tokens
				v.Schedule(at, P, &Submit{Request: Request{ID: id, Tokens: tokens, MaxTokens: 1}, Policy: Hold})
			case 2:
				if len(prompts) > 0 {
					if id := ids("reserve"); !reserved[id] {
						reserved[id] = true
						v.Schedule(at, D, &Reserve{Request: Request{ID: id, Tokens: prompts[id], MaxTokens: rapid.IntRange(1, 6).Draw(rt, "max")}})
					}
				}
			case 3:
				if len(prompts) > 0 {
					id := ids("transfer")
					v.Schedule(at, P, StartTransfer{ID: id, Tokens: rapid.IntRange(0, len(prompts[id])).Draw(rt, "tokens")})
				}
			case 4:
				if len(prompts) > 0 {
					v.Schedule(at, P, ReleaseHeld{ID: ids("abort"), Outcome: Aborted})
				}
			case 5:
				if len(prompts) > 0 {
					v.Schedule(at, D, Activate{ID: ids("activate")})
				}
			default:
				if len(prompts) > 0 {
					v.Schedule(at, D, CancelDestination{ID: ids("cancel_dest")})
				}
			}
		}
		if err := v.Run(); err != nil {
			rt.Fatal(err)
		}

		// Drain: abort every hold and cancel every destination still waiting
		// or reserved, until both workers are idle with nothing held.
		for round := 0; ; round++ {
			if round == 100 {
				rt.Fatalf("did not drain: prefill %+v decode %+v", pre.Metrics(), dec.Metrics())
			}
			mp, md := pre.Metrics(), dec.Metrics()
			if mp.HeldRequests == 0 && md.ReservedRequests == 0 && !pre.Scheduler().HasWork() && !dec.Scheduler().HasWork() {
				if _, ok := pre.NextWake(); !ok {
					break
				}
			}
			for id := range prompts {
				v.Schedule(v.Now(), P, ReleaseHeld{ID: id, Outcome: Aborted})
				v.Schedule(v.Now(), D, CancelDestination{ID: id})
			}
			if err := v.Run(); err != nil {
				rt.Fatal(err)
			}
		}

		// Source side: every submit ends once; every hold ends once.
		ended := map[uint64]string{}
		mark := func(side string, id uint64, how string) {
			if prev, dup := ended[id]; dup {
				rt.Fatalf("%s request %d ended twice: %s then %s", side, id, prev, how)
			}
			ended[id] = how
		}
		for _, c := range rec[P].completions {
			mark("prefill", c.RequestID, "completed")
			if !c.Held {
				rt.Fatalf("prefill request %d completed without holding", c.RequestID)
			}
		}
		for _, rj := range rec[P].rejections {
			mark("prefill", rj.RequestID, "rejected")
		}
		if len(ended) != len(prompts) {
			rt.Fatalf("prefill: submitted %d, ended %d", len(prompts), len(ended))
		}
		holds := map[uint64]int{}
		for _, e := range rec[P].eventsOf(EventHoldStarted) {
			holds[e.RequestID]++
		}
		for _, e := range rec[P].eventsOf(EventHoldReleased) {
			holds[e.RequestID]--
			if e.Outcome == Transferred && len(rec[P].eventsFor(EventTransferStart, e.RequestID)) != 1 {
				rt.Fatalf("request %d transferred without a transfer start", e.RequestID)
			}
		}
		for id, n := range holds {
			if n != 0 {
				rt.Fatalf("request %d: holds started minus ended = %d", id, n)
			}
		}

		// Destination side: every reservation ends once, by cancellation
		// (a refusal before any reservation emits one too, alongside its
		// Rejection) or activation. An activated request then completes
		// once: having streamed the prefill's token, it is never rejected,
		// even when it outgrows a small pool (it completes Truncated).
		ended = map[uint64]string{}
		for _, e := range rec[D].eventsOf(EventDestinationCancelled) {
			mark("decode", e.RequestID, "cancelled")
		}
		activated := map[uint64]bool{}
		for _, e := range rec[D].eventsOf(EventDestinationActivated) {
			if len(rec[D].eventsFor(EventDecodeReserved, e.RequestID)) != 1 {
				rt.Fatalf("decode request %d activated without one reservation", e.RequestID)
			}
			mark("decode", e.RequestID, "activated")
			activated[e.RequestID] = true
		}
		after := map[uint64]string{}
		for _, c := range rec[D].completions {
			if !activated[c.RequestID] {
				rt.Fatalf("decode request %d completed without an activation", c.RequestID)
			}
			if _, dup := after[c.RequestID]; dup {
				rt.Fatalf("decode request %d completed twice", c.RequestID)
			}
			after[c.RequestID] = "completed"
		}
		for _, rj := range rec[D].rejections {
			if activated[rj.RequestID] {
				rt.Fatalf("decode request %d rejected after its activation: %+v", rj.RequestID, rj)
			}
			if len(rec[D].eventsFor(EventDestinationCancelled, rj.RequestID)) != 1 {
				rt.Fatalf("decode request %d rejected without closing its wait", rj.RequestID)
			}
		}
		if len(after) != len(activated) {
			rt.Fatalf("decode: %d activated, %d ended after activation", len(activated), len(after))
		}
		if len(ended) != len(reserved) {
			rt.Fatalf("decode: reserved %d, ended %d", len(reserved), len(ended))
		}

		for i, w := range []*Worker{pre, dec} {
			m := w.Metrics()
			if m.HeldRequests != 0 || m.HeldBlocks != 0 || m.ReservedRequests != 0 || m.ReservedBlocks != 0 ||
				m.TransferringRequests != 0 || m.ActiveBlocks != 0 || m.Running != 0 || m.Waiting != 0 {
				rt.Fatalf("worker %d after drain: %+v", i, m)
			}
			if _, ok := w.NextDeadline(); ok {
				rt.Fatalf("worker %d: a deadline outlived its hold", i)
			}
		}
	})
}
