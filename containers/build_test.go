package containers_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/kvstrand/mocker/containers"
)

func TestBuildGoImage_RoundTrip(t *testing.T) {
	containers.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	tag := "mocker-local/hello-test:" + time.Now().UTC().Format("20060102t150405.000000000")
	ref, err := containers.BuildGoImage(ctx, containers.ImageSpec{
		Tag:     tag,
		Package: "./containers/testdata/hello",
		Cmd:     []string{"default", "args"},
	})
	require.NoError(t, err)
	assert.Equal(t, tag, ref)
	t.Cleanup(func() { removeImage(t, tag) })

	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:      tag,
			Cmd:        []string{"from", "the", "test"},
			Labels:     map[string]string{containers.LabelOwner: "1"},
			WaitingFor: wait.ForExit().WithExitTimeout(time.Minute),
		},
		Started: true,
	})
	if ctr != nil {
		t.Cleanup(func() { _ = ctr.Terminate(context.Background()) })
	}
	require.NoError(t, err)

	state, err := ctr.State(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, state.ExitCode)
	rc, err := ctr.Logs(ctx)
	require.NoError(t, err)
	defer rc.Close()
	out, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.Equal(t, "hello from mocker image: from the test\n", string(out))
}

func TestBuildGoImage_CompileErrorNamesThePackage(t *testing.T) {
	containers.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := containers.BuildGoImage(ctx, containers.ImageSpec{
		Tag:     "mocker-local/never-built:test",
		Package: "./containers/testdata/does-not-exist",
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "go build ./containers/testdata/does-not-exist")
}

func TestBuildGoImage_RejectsIncompleteSpec(t *testing.T) {
	_, err := containers.BuildGoImage(context.Background(), containers.ImageSpec{Package: "./cmd/mocker"})
	require.ErrorContains(t, err, "Tag is empty")
	_, err = containers.BuildGoImage(context.Background(), containers.ImageSpec{Tag: "x:y"})
	require.ErrorContains(t, err, "Package is empty")
}

func removeImage(t *testing.T, ref string) {
	t.Helper()
	cli, err := testcontainers.NewDockerClientWithOpts(context.Background())
	require.NoError(t, err)
	defer cli.Close()
	_, err = cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	assert.NoError(t, err)
}
