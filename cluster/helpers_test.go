package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// start builds a cluster that is closed when the test ends. Unless the
// test has already failed or closed the cluster itself, the cleanup first
// drains it and checks docs/design.md §6, so every test that builds a cluster also
// checks that its load left nothing behind.
func start(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if !t.Failed() && !closed {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := c.Drain(ctx)
			cancel()
			if assert.NoError(t, err, "draining at the end of the test") {
				assert.NoError(t, c.CheckInvariants(), "invariants at the end of the test")
			}
		}
		assert.NoError(t, c.Close())
	})
	return c
}

// drainAndCheck drains c and checks docs/design.md §6.
func drainAndCheck(t *testing.T, c *Cluster) Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Drain(ctx)
	require.NoError(t, err)
	require.NoError(t, c.CheckInvariants())
	return s
}

// runAll sends reqs concurrently and returns their results in order.
func runAll(c *Cluster, reqs []Request) []Result {
	out := make([]Result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c.Generate(context.Background(), r)
		}()
	}
	wg.Wait()
	return out
}

// waitFor polls cond (a condition on the cluster's state, not on time)
// until it holds, failing the test after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func repeat(r Request, n int) []Request {
	out := make([]Request, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// newClusterOf plans cfg and builds the cluster as opts say.
func newClusterOf(cfg Config, opts options) (*Cluster, error) {
	p, err := cfg.Plan()
	if err != nil {
		return nil, err
	}
	return newCluster(p, opts)
}
