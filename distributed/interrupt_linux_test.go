package distributed

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/harness"
	_ "github.com/kvstrand/mocker/xk6mocker" // k6/x/mocker for the script
)

// stuckScript runs closed-loop users on one attached worker for far
// longer than the test lasts.
const stuckScript = `
import mocker from 'k6/x/mocker';

const cluster = mocker.cluster({
  name: 'stuck',
  workers: 1,
  args: { speedup_ratio: 1 },
  transport: { etcd: [__ENV.ETCD], nats: __ENV.NATS, namespace: __ENV.NS, coupled: __ENV.COUPLED === '1' },
});

export const options = {
  scenarios: { load: { executor: 'constant-vus', vus: 4, duration: '600s', gracefulStop: '600s' } },
};

export default function () {
  cluster.generate({ prompt_tokens: 256, max_tokens: 4096 });
}

export function teardown() {
  const s = cluster.drain(600000);
  console.log('teardown: drained ' + s.drained);
}
`

// TestInterrupt_RunStuckOnAWorkerThatNeverAnswersEnds: a run whose only
// worker keeps its lease (a real registration, kept alive) but answers
// nothing more (its process stopped with SIGSTOP) still ends on the first
// interrupt, the way `mocker run` cancels on SIGINT: within a bounded
// time, with its summary and exit code 105.
func TestInterrupt_RunStuckOnAWorkerThatNeverAnswersEnds(t *testing.T) {
	for _, coupled := range []bool{true, false} {
		name := "uncoupled"
		if coupled {
			name = "coupled"
		}
		t.Run(name, func(t *testing.T) { stuckRun(t, coupled) })
	}
}

func stuckRun(t *testing.T, coupled bool) {
	ls := services(t)
	ns := "stuck"
	ec := etcdClient(t, ls)
	worker := exec.Command(os.Getenv(WorkerBinaryEnv), "worker", "--name", "worker-0", "--role", "aggregated",
		"--namespace", ns, "--etcd", ls.etcdURL, "--nats", ls.natsURL, "--args", `{"speedup_ratio": 1}`)
	var wout bytes.Buffer
	worker.Stdout, worker.Stderr = &wout, &wout
	require.NoError(t, worker.Start())
	t.Cleanup(func() {
		_ = worker.Process.Kill()
		_ = worker.Wait()
	})
	var lease clientv3.LeaseID
	require.Eventually(t, func() bool {
		r, ok := registrations(t, ec, ns)["worker-0"]
		lease = clientv3.LeaseID(r.InstanceID)
		return ok
	}, 30*time.Second, 20*time.Millisecond, "worker registered: %s", &wout)

	dir := t.TempDir()
	script := filepath.Join(dir, "stuck.js")
	require.NoError(t, os.WriteFile(script, []byte(stuckScript), 0o600))
	export := filepath.Join(dir, "summary.json")
	env := map[string]string{"ETCD": ls.etcdURL, "NATS": ls.natsURL, "NS": ns, "COUPLED": "0"}
	if coupled {
		env["COUPLED"] = "1"
	}
	var out bytes.Buffer
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ran := make(chan error, 1)
	go func() {
		ran <- harness.Run(ctx, harness.Config{Script: script, Env: env, Clock: harness.ClockPaced, Quiet: true, NoColor: true,
			SummaryExport: export, Stdout: &out, Stderr: &out})
	}()

	// Requests flow, then the worker stops answering; its lease stays
	// alive (kept by the test), so the router never hears it is gone.
	time.Sleep(2 * time.Second)
	require.NoError(t, syscall.Kill(worker.Process.Pid, syscall.SIGSTOP))
	kaCtx, kaStop := context.WithCancel(context.Background())
	defer kaStop()
	ka, err := ec.KeepAlive(kaCtx, lease)
	require.NoError(t, err)
	go func() {
		for range ka {
		}
	}()
	time.Sleep(time.Second)
	interrupted := time.Now()
	cancel(errorString("test run was aborted because mocker received a 'interrupt' signal"))

	// The lease is kept, so nothing but the interrupt ends the run.
	select {
	case err = <-ran:
	case <-time.After(30 * time.Second):
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("the run did not end within 30 s of the interrupt; output so far:\n%s\n%s", &out, buf)
	}
	assert.Equal(t, harness.ExitExternalAbort, harness.ExitCode(err), "%v\n%s", err, &out)
	raw, rerr := os.ReadFile(export)
	require.NoError(t, rerr, "summary written:\n%s", &out)
	var sum map[string]any
	require.NoError(t, json.Unmarshal(raw, &sum))
	assert.Contains(t, sum, "metrics")
	assert.Contains(t, out.String(), `KV HANDOFF  cluster "stuck"`, "the summary")
	assert.Regexp(t, `requests\.+: \d+ \(completed \d+, aborted \d+, rejected \d+, error [1-9]`, out.String(),
		"the requests on the silent worker ended")
	t.Logf("ended %s after the interrupt:\n%s", time.Since(interrupted).Round(time.Millisecond), &out)
}

type errorString string

func (e errorString) Error() string { return string(e) }
