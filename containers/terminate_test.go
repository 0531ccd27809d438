package containers_test

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"

	"github.com/kvstrand/mocker/containers"
)

// removeContainer removes a container behind the package's back, as a test
// or an operator (docker rm -f) might.
func removeContainer(t *testing.T, id string) {
	t.Helper()
	cli, err := testcontainers.NewDockerClientWithOpts(context.Background())
	require.NoError(t, err)
	defer cli.Close()
	_, err = cli.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	require.NoError(t, err)
}

// TestTerminate_ToleratesAContainerAlreadyRemoved: the goal of Terminate,
// no container left, is met when someone else removed it first, so it
// returns nil — here and in the cleanup NATSForTest and EtcdForTest
// registered, which fails the test otherwise.
func TestTerminate_ToleratesAContainerAlreadyRemoved(t *testing.T) {
	tests := []struct {
		name  string
		start func(t *testing.T) (id string, terminate func(context.Context) error)
	}{
		{"nats", func(t *testing.T) (string, func(context.Context) error) {
			n := containers.NATSForTest(t)
			return n.ContainerID(), n.Terminate
		}},
		{"etcd", func(t *testing.T) (string, func(context.Context) error) {
			e := containers.EtcdForTest(t)
			return e.ContainerID(), e.Terminate
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, terminate := tt.start(t)
			removeContainer(t, id)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			assert.NoError(t, terminate(ctx))
			assert.NoError(t, terminate(ctx), "and again")
		})
	}
}
