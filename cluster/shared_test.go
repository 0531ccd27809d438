package cluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShared_SameNameSameCluster(t *testing.T) {
	t.Cleanup(func() { require.NoError(t, CloseShared()) })
	cfg := Config{Name: "shared-a", Workers: 1, Args: map[string]any{"num_gpu_blocks": int64(64)}}
	a, err := Shared(cfg)
	require.NoError(t, err)
	// The same values, as a script runtime would pass them another time.
	b, err := Shared(Config{Name: "shared-a", Workers: 1, Args: map[string]any{"num_gpu_blocks": float64(64)}})
	require.NoError(t, err)
	assert.Same(t, a, b)

	_, err = Shared(Config{Name: "shared-a", Workers: 2, Args: map[string]any{"num_gpu_blocks": int64(64)}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `name: cluster "shared-a" already exists with another config: workers 1 vs 2`)
	assert.Contains(t, err.Error(), "another name")
	var inUse *NameInUseError
	require.ErrorAs(t, err, &inUse)
	assert.Equal(t, "workers 1 vs 2", inUse.Diff)

	// A bad field is reported as such, not as a name collision.
	_, err = Shared(Config{Name: "shared-a", Workers: 1, Args: map[string]any{"num_gpu_blocks": int64(-1)}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "args.num_gpu_blocks")
	assert.NotErrorAs(t, err, &inUse)

	other, err := Shared(Config{Name: "shared-b", Workers: 1})
	require.NoError(t, err)
	assert.NotSame(t, a, other)

	res := a.Generate(context.Background(), Request{PromptTokens: 8, MaxTokens: 2})
	require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
	drainAndCheck(t, a)

	require.NoError(t, CloseShared())
	res = a.Generate(context.Background(), Request{PromptTokens: 8})
	assert.Equal(t, OutcomeError, res.Outcome)
	assert.Equal(t, errClosed, res.Error)
	c, err := Shared(cfg)
	require.NoError(t, err)
	assert.NotSame(t, a, c, "a new cluster after CloseShared")
}

func TestShared_ClosedDirectlyIsReplaced(t *testing.T) {
	t.Cleanup(func() { require.NoError(t, CloseShared()) })
	a, err := Shared(Config{Name: "shared-c", Workers: 1})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	b, err := Shared(Config{Name: "shared-c", Workers: 1})
	require.NoError(t, err)
	assert.NotSame(t, a, b)
}
