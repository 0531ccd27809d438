package harness

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A task that keeps its turn while the process gets no CPU (a host that
// starves it, a stopped process) is not stuck: the clock stays where the
// task took its turn. The same wall time with the CPU a spinning task
// burns is stuck, and the clock moves with the wall clock.
func TestWatchStuck_NeedsTheCPUASpinningTaskBurns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cpuShare time.Duration // the process CPU time burned in each wall second
		stuck    bool
	}{
		{"starved", 50 * time.Millisecond, false},
		{"spinning", time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewVirtualClock(DefaultVirtualEpoch)
			start := time.Now()
			fakeCPU := func() time.Duration {
				return time.Duration(float64(time.Since(start)) * float64(tc.cpuShare) / float64(time.Second))
			}
			var found atomic.Int32
			stop := c.watchStuckWith(func() { found.Add(1) }, fakeCPU)
			defer stop()
			held := make(chan struct{})
			c.goTask(func() {
				time.Sleep(3 * stuckAfter) // keeps the turn: no wait on the clock
				close(held)
			})
			c.Done() // the test's own turn (a clock starts held by its creator)
			<-held
			stop()
			if tc.stuck {
				assert.Equal(t, int32(1), found.Load(), "found stuck once")
				assert.GreaterOrEqual(t, c.Elapsed(), stuckAfter, "the clock moved with the wall clock")
			} else {
				assert.Zero(t, found.Load(), "a starved process is not a stuck script")
				assert.Zero(t, c.Elapsed(), "and the clock did not move")
			}
		})
	}
}
