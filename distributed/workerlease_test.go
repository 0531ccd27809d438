package distributed

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
)

// TestWorkerLease_LostRegistersAgainUnderANewLease ends a live worker's
// lease behind its back (as etcd does when the worker cannot reach it for
// longer than the TTL): the requests of the old session end with an
// outcome, and the worker, instead of exiting, registers again under a
// new lease, which the router joins and sends new requests to.
func TestWorkerLease_LostRegistersAgainUnderANewLease(t *testing.T) {
	t.Parallel()
	const ns = "worker-lease"
	ls, cfg := oneWorker(t, ns)
	c, err := cluster.New(cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	const n = 2
	results := longRequests(context.Background(), c, n)
	require.Eventually(t, func() bool { return c.Stats().Workers[0].Running == n }, time.Minute, 5*time.Millisecond)

	ec := etcdClient(t, ls)
	old := registrations(t, ec, ns)["w0"].InstanceID
	require.NotZero(t, old)
	_, err = ec.Revoke(context.Background(), clientv3.LeaseID(old))
	require.NoError(t, err)

	for range n {
		select {
		case r := <-results:
			assert.Equal(t, cluster.OutcomeError, r.Outcome)
			assert.Regexp(t, `worker w0 lost|etcd lease [0-9a-f]+ ended`, r.Error)
		case <-time.After(time.Minute):
			t.Fatal("a request of the old session did not end")
		}
	}

	var now plane.Registration
	require.Eventually(t, func() bool {
		now = registrations(t, ec, ns)["w0"]
		return now.InstanceID != 0 && now.InstanceID != old
	}, 3*plane.LeaseTTLSeconds*time.Second, 10*time.Millisecond, "w0 registered again under a new lease")
	resp, err := ec.Get(context.Background(), plane.RegistrationKey(ns, now.InstanceID))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, now.InstanceID, resp.Kvs[0].Lease, "the new registration lives under the lease its instance id names")
	assert.Equal(t, plane.CmdSubject(ns, now.InstanceID), now.CmdSubject)

	// The router joins the worker again and serves new requests on it.
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r := c.Generate(ctx, cluster.Request{PromptTokens: 64, MaxTokens: 4})
		return r.Outcome == cluster.OutcomeCompleted && r.PrefillWorker == "w0"
	}, 30*time.Second, 50*time.Millisecond, "a new request completes on w0")
	// The old session's requests were withdrawn: nothing is left running.
	require.Eventually(t, func() bool {
		for _, w := range c.Stats().Workers {
			if w.Running != 0 || w.Waiting != 0 || w.ActiveBlocks != 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "the old session's requests still run: %+v", c.Stats().Workers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Drain(ctx)
	require.NoError(t, err)
	assert.Equal(t, s.Requests, s.Completed+s.Aborted+s.Rejected+s.Errored, "request conservation")
}
