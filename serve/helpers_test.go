package serve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// fast is engine args for tests that need no particular pacing: modeled
// time runs 1000 times the wall clock's.
var fast = map[string]any{"speedup_ratio": 1000}

// startServer serves cfg on a loopback test server. When the test ends,
// unless it failed, the cluster is drained and its invariants checked
// (cluster.CheckInvariants), so every test also checks that its load left
// nothing behind.
func startServer(t testing.TB, cfg cluster.Config, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(cfg, opts)
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		if !t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := s.Drain(ctx)
			cancel()
			if assert.NoError(t, err, "draining at the end of the test") {
				assert.NoError(t, s.Cluster().CheckInvariants(), "invariants at the end of the test")
			}
		}
		assert.NoError(t, s.Close())
	})
	return s, ts
}

// client is the test server's client, whose connections end with it.
func client(ts *httptest.Server) *http.Client { return ts.Client() }
