package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFleet_Names: the workers are named PREFIX-0 … PREFIX-(N-1); one
// worker keeps its own name; counts and prefixes that make no sense are
// usage errors naming the flag.
func TestFleet_Names(t *testing.T) {
	t.Parallel()
	names, err := Fleet{Count: 3, NamePrefix: "p"}.Names()
	require.NoError(t, err)
	assert.Equal(t, []string{"p-0", "p-1", "p-2"}, names)
	names, err = Fleet{Config: Config{Name: "d"}, Count: 2}.Names()
	require.NoError(t, err)
	assert.Equal(t, []string{"d-0", "d-1"}, names, "--name is the prefix with --count")
	names, err = Fleet{Config: Config{Name: "solo"}}.Names()
	require.NoError(t, err)
	assert.Equal(t, []string{"solo"}, names, "without --count the name is kept")
	names, err = Fleet{Count: 1, NamePrefix: "x"}.Names()
	require.NoError(t, err)
	assert.Equal(t, []string{"x-0"}, names)
	for _, tt := range []struct {
		f    Fleet
		want string
	}{
		{Fleet{Count: -1, NamePrefix: "p"}, "--count -1: want 1 to 1024"},
		{Fleet{Count: MaxFleet + 1, NamePrefix: "p"}, "--count 1025: want 1 to 1024"},
		{Fleet{Count: 2}, "--count 2: needs --name-prefix"},
		{Fleet{Config: Config{Name: "a"}, Count: 2, NamePrefix: "b"}, `--name "a" and --name-prefix "b": give one`},
	} {
		_, err := tt.f.Names()
		require.Error(t, err)
		assert.True(t, IsUsage(err), err)
		assert.Contains(t, err.Error(), tt.want)
	}
}

// TestRunFleet_AWorkerThatFailsStopsTheOthers: worker 2 of 4 fails to
// start; the others, running, see their context end, and RunFleet
// returns the failure naming worker 2, a usage error still.
func TestRunFleet_AWorkerThatFailsStopsTheOthers(t *testing.T) {
	var mu sync.Mutex
	seeds := map[string]uint64{}
	stopped := map[string]bool{}
	runOne = func(ctx context.Context, cfg Config) error {
		mu.Lock()
		seeds[cfg.Name] = cfg.Seed
		mu.Unlock()
		if cfg.Name == "w-2" {
			time.Sleep(20 * time.Millisecond)
			return usage(errors.New("--args: no good"))
		}
		<-ctx.Done()
		mu.Lock()
		stopped[cfg.Name] = true
		mu.Unlock()
		return nil
	}
	defer func() { runOne = Run }()
	err := RunFleet(context.Background(), Fleet{Config: Config{Seed: 7}, Count: 4, NamePrefix: "w"})
	require.Error(t, err)
	assert.True(t, IsUsage(err))
	assert.Contains(t, err.Error(), "worker w-2: --args: no good")
	assert.Contains(t, err.Error(), "other 3 workers were stopped")
	assert.Equal(t, map[string]bool{"w-0": true, "w-1": true, "w-3": true}, stopped)
	assert.Equal(t, map[string]uint64{"w-0": 7, "w-1": 8, "w-2": 9, "w-3": 10}, seeds)
}

// TestRunFleet_ContextEndStopsAll: every worker sees the fleet's context
// end, and RunFleet returns nil once all have returned.
func TestRunFleet_ContextEndStopsAll(t *testing.T) {
	var mu sync.Mutex
	left := 0
	runOne = func(ctx context.Context, cfg Config) error {
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond) // a drain
		mu.Lock()
		left++
		mu.Unlock()
		return nil
	}
	defer func() { runOne = Run }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunFleet(ctx, Fleet{Count: 5, NamePrefix: "w"}) }()
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, 5, left, "RunFleet returned before every worker left")
}
