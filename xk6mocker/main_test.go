package xk6mocker

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// closedCluster is what the test hook saw of a cluster at the end of its
// run, after draining it.
type closedCluster struct {
	name       string
	stats      cluster.Stats
	drainErr   error
	invariants error
}

// runResult is one in-process run of a testdata script.
type runResult struct {
	code     int
	err      error
	stdout   string
	stderr   string
	clusters []closedCluster
}

// hookMu serialises runs: the close hook and the summary hook are
// process-wide.
var hookMu sync.Mutex

// runScript runs testdata/name through the harness and waits for the run's
// clusters to close. Every cluster is drained and its docs/design.md §6 invariants
// checked right before it closes; the test fails if any is violated.
func runScript(t *testing.T, name string, env map[string]string, outputs ...string) runResult {
	t.Helper()
	return runScriptWith(t, name, env, func(c *harness.Config) { c.Outputs = outputs })
}

// runScriptWith is runScript with the run's config changed by mod.
func runScriptWith(t *testing.T, name string, env map[string]string, mod func(*harness.Config)) runResult {
	t.Helper()
	return runScriptCtx(t, context.Background(), name, env, mod)
}

// runScriptCtx is runScriptWith with the context handed to harness.Run.
func runScriptCtx(t *testing.T, ctx context.Context, name string, env map[string]string, mod func(*harness.Config)) runResult {
	t.Helper()
	hookMu.Lock()
	defer hookMu.Unlock()
	var (
		mu   sync.Mutex
		seen []closedCluster
	)
	beforeClose = func(name string, c *cluster.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st, err := c.Drain(ctx)
		inv := c.CheckInvariants()
		mu.Lock()
		seen = append(seen, closedCluster{name: name, stats: st, drainErr: err, invariants: inv})
		mu.Unlock()
	}
	defer func() { beforeClose = nil }()
	var stdout, stderr bytes.Buffer
	cfg := harness.Config{
		Script:  filepath.Join("testdata", name),
		Env:     env,
		Quiet:   true,
		NoColor: true,
		Stdout:  &stdout,
		Stderr:  &stderr,
	}
	if mod != nil {
		mod(&cfg)
	}
	err := harness.Run(ctx, cfg)
	closing.Wait()
	res := runResult{code: harness.ExitCode(err), err: err, stdout: stdout.String(), stderr: stderr.String(), clusters: seen}
	for _, c := range seen {
		require.NoErrorf(t, c.drainErr, "cluster %q did not drain at the end of the run", c.name)
		require.NoErrorf(t, c.invariants, "cluster %q violates an invariant after the run", c.name)
	}
	return res
}
