package cluster

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/bootstrap"
)

// TestTransferServers_HijackAndFloodLeaveHandoffsTransferred: while 200
// real requests run, another process claims transfer ids 1–300 on every
// prefill's transfer port with wrong request ids and forged tokens, and
// holds 1,050 idle connections open. Every real handoff still transfers:
// unauthenticated connections never consume a room, and idle ones are
// evicted before they crowd out a decode.
func TestTransferServers_HijackAndFloodLeaveHandoffsTransferred(t *testing.T) {
	c := start(t, Config{Disagg: true, Router: "round-robin",
		Args:    map[string]any{"speedup_ratio": 20, "kv_transfer_abort_timeout_ms": 60000},
		Prefill: PoolConfig{Workers: 2}, Decode: PoolConfig{Workers: 2, Args: map[string]any{"max_num_seqs": 64}}})
	var addrs []string
	for _, w := range c.Stats().Workers {
		if w.TransferAddr != "" {
			addrs = append(addrs, w.TransferAddr)
		}
	}
	require.Len(t, addrs, 2)

	stop := make(chan struct{})
	var attackers sync.WaitGroup
	var idle []net.Conn
	var idleMu sync.Mutex
	var ready sync.WaitGroup // the attack is in place before the real requests start
	defer func() {
		close(stop)
		attackers.Wait()
		for _, conn := range idle {
			_ = conn.Close()
		}
	}()
	for _, addr := range addrs {
		attackers.Add(2)
		ready.Add(2)
		go func() { // claims with a forged token and a wrong request id
			defer attackers.Done()
			first := true
			var forged bootstrap.Token
			forged[0] = 1
			for round := 0; ; round++ {
				for tid := uint64(1); tid <= 300; tid++ {
					select {
					case <-stop:
						return
					default:
					}
					conn, err := net.DialTimeout("tcp", addr, time.Second)
					if err != nil {
						continue
					}
					_, _ = conn.Write(bootstrap.NewHeader(tid, tid+1_000_000, forged).Append(nil))
					_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
					var b [1]byte
					_, _ = conn.Read(b[:])
					_ = conn.Close()
				}
				if first {
					first = false
					ready.Done()
				}
			}
		}()
		go func() { // idle connections that never send a header
			defer attackers.Done()
			defer ready.Done()
			for range 525 {
				select {
				case <-stop:
					return
				default:
				}
				conn, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					continue
				}
				idleMu.Lock()
				idle = append(idle, conn)
				idleMu.Unlock()
			}
		}()
	}

	ready.Wait()
	results := runAll(c, repeat(Request{PromptTokens: 128, MaxTokens: 4}, 200))
	transferred := 0
	for _, r := range results {
		if r.Outcome == OutcomeCompleted && r.HoldOutcome == HoldTransferred {
			transferred++
		}
	}
	assert.Equal(t, 200, transferred, "every real handoff transferred despite the attack")
	s := c.Stats()
	assert.Equal(t, uint64(200), s.TransfersCompleted)
}
