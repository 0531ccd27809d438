package containers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kvstrand/mocker/containers"
)

func etcdClient(t *testing.T, e *containers.Etcd) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   e.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func TestEtcd_PutGetWatchLease(t *testing.T) {
	e := containers.EtcdForTest(t)
	require.Len(t, e.Endpoints(), 1)
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+$`, e.Endpoints()[0])
	cli := etcdClient(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("put and get", func(t *testing.T) {
		_, err := cli.Put(ctx, "mocker/test/a", "alpha")
		require.NoError(t, err)
		resp, err := cli.Get(ctx, "mocker/test/a")
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		assert.Equal(t, "alpha", string(resp.Kvs[0].Value))
	})

	t.Run("watch sees a put", func(t *testing.T) {
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		wch := cli.Watch(wctx, "mocker/test/watched/", clientv3.WithPrefix())
		_, err := cli.Put(ctx, "mocker/test/watched/x", "1")
		require.NoError(t, err)
		select {
		case wr := <-wch:
			require.NoError(t, wr.Err())
			require.Len(t, wr.Events, 1)
			assert.Equal(t, clientv3.EventTypePut, wr.Events[0].Type)
			assert.Equal(t, "mocker/test/watched/x", string(wr.Events[0].Kv.Key))
		case <-ctx.Done():
			t.Fatal("no watch event for the put")
		}
	})

	t.Run("lease expiry deletes the key", func(t *testing.T) {
		lease, err := cli.Grant(ctx, 1)
		require.NoError(t, err)
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		wch := cli.Watch(wctx, "mocker/test/leased")
		_, err = cli.Put(ctx, "mocker/test/leased", "x", clientv3.WithLease(lease.ID))
		require.NoError(t, err)

		var sawDelete bool
		for !sawDelete {
			select {
			case wr := <-wch:
				require.NoError(t, wr.Err())
				for _, ev := range wr.Events {
					sawDelete = sawDelete || ev.Type == clientv3.EventTypeDelete
				}
			case <-ctx.Done():
				t.Fatal("leased key was not deleted after its TTL")
			}
		}
		resp, err := cli.Get(ctx, "mocker/test/leased")
		require.NoError(t, err)
		assert.Empty(t, resp.Kvs)
	})
}

func TestEtcd_RestartKeepsEndpointAndClientReconnects(t *testing.T) {
	e := containers.EtcdForTest(t)
	before := e.Endpoints()
	cli := etcdClient(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	_, err := cli.Put(ctx, "mocker/test/durable", "kept")
	require.NoError(t, err)

	require.NoError(t, e.Restart(ctx))
	assert.Equal(t, before, e.Endpoints(), "endpoints must survive a restart")

	// The same client, never recreated, must serve reads again.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		defer gcancel()
		resp, err := cli.Get(gctx, "mocker/test/durable")
		if !assert.NoError(c, err) || !assert.Len(c, resp.Kvs, 1) {
			return
		}
		assert.Equal(c, "kept", string(resp.Kvs[0].Value))
	}, time.Minute, 200*time.Millisecond)
}

func TestEtcd_StopThenStart(t *testing.T) {
	e := containers.EtcdForTest(t)
	cli := etcdClient(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	require.NoError(t, e.Stop(ctx))
	gctx, gcancel := context.WithTimeout(ctx, time.Second)
	_, err := cli.Get(gctx, "anything")
	gcancel()
	require.Error(t, err, "a stopped etcd must not answer")

	require.NoError(t, e.Start(ctx))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		defer gcancel()
		_, err := cli.Put(gctx, "mocker/test/after-start", "y")
		assert.NoError(c, err)
	}, time.Minute, 200*time.Millisecond)
}

func TestEtcd_FailedStartReportsContainerLogs(t *testing.T) {
	containers.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	e, err := containers.StartEtcd(ctx, containers.WithArgs("--no-such-flag-for-test"), containers.WithStartupTimeout(30*time.Second))
	if e != nil {
		_ = e.Terminate(ctx)
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "last container log lines")
	assert.Contains(t, err.Error(), "no-such-flag-for-test")
}
