package containers_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/containers"
)

func TestNATS_PublishSubscribeAndRequestReply(t *testing.T) {
	n := containers.NATSForTest(t)
	assert.Regexp(t, `^nats://127\.0\.0\.1:\d+$`, n.URL())

	nc, err := nats.Connect(n.URL(), nats.Timeout(5*time.Second))
	require.NoError(t, err)
	defer nc.Close()

	t.Run("publish subscribe", func(t *testing.T) {
		sub, err := nc.SubscribeSync("mocker.test.events")
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		require.NoError(t, nc.Publish("mocker.test.events", []byte("stored")))
		msg, err := sub.NextMsg(5 * time.Second)
		require.NoError(t, err)
		assert.Equal(t, "stored", string(msg.Data))
	})

	t.Run("request reply", func(t *testing.T) {
		sub, err := nc.Subscribe("mocker.test.echo", func(m *nats.Msg) {
			_ = m.Respond(append([]byte("echo:"), m.Data...))
		})
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		reply, err := nc.Request("mocker.test.echo", []byte("ping"), 5*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "echo:ping", string(reply.Data))
	})

	t.Run("monitoring answers", func(t *testing.T) {
		resp, err := http.Get(n.MonitorURL() + "/healthz")
		require.NoError(t, err)
		defer resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	})
}

func TestNATS_RestartKeepsURLAndClientReconnects(t *testing.T) {
	n := containers.NATSForTest(t)
	before := n.URL()

	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(n.URL(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}),
	)
	require.NoError(t, err)
	defer nc.Close()
	sub, err := nc.SubscribeSync("mocker.test.after")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, n.Restart(ctx))
	assert.Equal(t, before, n.URL(), "URL must survive a restart")

	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("nats.go did not reconnect after the restart")
	}
	// The subscription made before the restart is replayed on reconnect.
	require.NoError(t, nc.Publish("mocker.test.after", []byte("again")))
	msg, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "again", string(msg.Data))
	// Docker's port proxy accepts connections a moment before nats-server
	// listens, so a client may reconnect, be dropped and reconnect again.
	assert.GreaterOrEqual(t, nc.Stats().Reconnects, uint64(1))
}

func TestStackForTest_StartsBoth(t *testing.T) {
	s := containers.StackForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	nc, err := nats.Connect(s.NATS.URL())
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.FlushWithContext(ctx))

	resp, err := http.Get(s.Etcd.Endpoints()[0] + "/health")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
