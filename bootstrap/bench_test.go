package bootstrap

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkHandoff drives full handoffs through the real TCP server on
// loopback: Open, Await (dial + header), OnDecodeArrived completes the
// room, the client reads ACK. It reports handoffs per second and the p99
// handshake overhead, from dial to ACK received: over a fresh connection
// each time (Await, "dial") and over kept connections (Client, "client").
func BenchmarkHandoff(b *testing.B) {
	var cl Client
	defer cl.Close()
	for _, bc := range []struct {
		name  string
		await func(ctx context.Context, addr string, tid, rid uint64, tok Token) (Status, error)
	}{{"dial", Await}, {"client", cl.Await}} {
		b.Run(bc.name, func(b *testing.B) { benchmarkHandoff(b, bc.await) })
	}
}

func benchmarkHandoff(b *testing.B, await func(ctx context.Context, addr string, tid, rid uint64, tok Token) (Status, error)) {
	var s *Server
	s, err := Listen(Config{OnDecodeArrived: func(id, _ uint64) {
		if err := s.Complete(id); err != nil {
			b.Error(err)
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
	}()
	addr := s.AdvertisedAddr()

	var mu sync.Mutex
	var all []time.Duration
	b.SetParallelism(4) // handoffs mostly wait on the network
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := b.Context()
		lat := make([]time.Duration, 0, 1024)
		for pb.Next() {
			id := NextTransferID()
			if err := s.Open(id); err != nil {
				b.Error(err)
				return
			}
			t0 := time.Now()
			st, err := await(ctx, addr, id, id, s.Token(id, id))
			lat = append(lat, time.Since(t0))
			if err != nil || st != StatusACK {
				b.Errorf("handoff %d: status %v, err %v", id, st, err)
				return
			}
		}
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	p99 := all[min(len(all)-1, len(all)*99/100)]
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "handoffs/s")
	b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
}
