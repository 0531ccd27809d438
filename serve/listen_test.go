package serve

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// TestListen_ConnectionsBeyondTheLimitWaitAndAreServed: with a limit of 4
// connections, 40 clients each on its own connection are all served, and
// never more than 4 at once.
func TestListen_ConnectionsBeyondTheLimitWaitAndAreServed(t *testing.T) {
	t.Parallel()
	const limit, clients = 4, 40
	s, err := New(cluster.Config{Args: map[string]any{"speedup_ratio": 100}}, Options{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	ln, err := Listen("127.0.0.1:0", limit)
	require.NoError(t, err)
	var now, peak atomic.Int64
	h := s.Handler()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		h.ServeHTTP(w, r)
		now.Add(-1)
	})}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One connection each: no keep-alive sharing.
			tr := &http.Transport{DisableKeepAlives: true}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Post("http://"+ln.Addr().String()+"/v1/completions", "application/json",
				strings.NewReader(`{"prompt": "wait your turn", "max_tokens": 20, "stream": true}`))
			if !assert.NoError(t, err) {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, hs.Close())
	assert.ErrorIs(t, <-served, http.ErrServerClosed)
	assert.Equal(t, int64(clients), ok.Load())
	assert.LessOrEqual(t, peak.Load(), int64(limit))
	assert.Positive(t, peak.Load())
}

func TestListen_NegativeLimitNamed(t *testing.T) {
	t.Parallel()
	_, err := Listen("127.0.0.1:0", -1)
	require.ErrorContains(t, err, "max connections: want 0")
}
