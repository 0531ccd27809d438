package containers_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/kvstrand/mocker/containers"
)

// TestWithNetwork_ContainersReachTheServerByAlias runs a client program in a
// container on the same network, as a mocker worker would be.
func TestWithNetwork_ContainersReachTheServerByAlias(t *testing.T) {
	containers.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(map[string]string{containers.LabelOwner: "1"}))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, nw.Remove(context.Background())) })

	n := containers.NATSForTest(t, containers.WithNetwork(nw.Name, "bus"))
	assert.Equal(t, "nats://bus:4222", n.NetworkURL())

	tag := "mocker-local/natsping-test:" + time.Now().UTC().Format("20060102t150405.000000000")
	_, err = containers.BuildGoImage(ctx, containers.ImageSpec{Tag: tag, Package: "./containers/testdata/natsping"})
	require.NoError(t, err)
	t.Cleanup(func() { removeImage(t, tag) })

	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:      tag,
			Cmd:        []string{n.NetworkURL()},
			Networks:   []string{nw.Name},
			Labels:     map[string]string{containers.LabelOwner: "1"},
			WaitingFor: wait.ForExit().WithExitTimeout(time.Minute),
		},
		Started: true,
	})
	if ctr != nil {
		t.Cleanup(func() { _ = ctr.Terminate(context.Background()) })
	}
	require.NoError(t, err)
	rc, err := ctr.Logs(ctx)
	require.NoError(t, err)
	defer rc.Close()
	out, err := io.ReadAll(rc)
	require.NoError(t, err)
	state, err := ctr.State(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, state.ExitCode, "natsping output: %s", out)
	assert.True(t, strings.HasPrefix(string(out), "connected to "), "natsping output: %s", out)
}
