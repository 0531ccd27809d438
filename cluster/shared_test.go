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

	_, err = Shared(Config{Name: "shared-a", Workers: 2})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"shared-a"`)

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
