package harness

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// timeKeeper is a module that says it keeps modeled time (TimeKeeper).
type timeKeeper struct{}

func (timeKeeper) NewModuleInstance(VU) ModuleInstance {
	return ExportsFunc(func() Exports { return Exports{Default: map[string]any{}} })
}
func (timeKeeper) KeepsTime() bool { return true }

var registerTimeKeeper sync.Once

// auto runs on ClockAuto with the banner, which says what was chosen.
func auto(c *Config) { c.Clock, c.Quiet = ClockAuto, false }

// TestAutoClock_PlainScriptsRunAsK6RunsThem: under ClockAuto a script
// that imports no module keeping modeled time runs on the wall clock, where
// the time JavaScript takes counts: an iteration that never waits runs as
// fast as the CPU allows and the run's duration grows with it.
func TestAutoClock_PlainScriptsRunAsK6RunsThem(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';
const spent = new Counter('spent');
export const options = { scenarios: { s: { executor: 'shared-iterations', vus: 2, iterations: 20000, maxDuration: '5m' } } };
export default function () {
  if (exec.scenario.iterationInTest === 19999) {
    const t0 = Date.now();
    while (Date.now() - t0 < 20) {}
    spent.add(exec.instance.currentTestRunDuration);
  }
}
`, auto)
	require.NoError(t, res.err, res.stderr)
	assert.Contains(t, res.stderr, "clock: wall")
	assert.Contains(t, res.stderr, "imports no module that keeps modeled time")
	assert.Equal(t, 20_000.0, res.metric(t, "iterations", "count"))
	assert.GreaterOrEqual(t, res.metric(t, "spent", "count"), 20.0, "JavaScript time counts in the run's duration")
	assert.NotContains(t, res.stderr, "took no script time")
}

// TestAutoClock_ATimeKeeperPacesTheRun: a script importing a module that
// keeps modeled time, directly or through a file it imports, runs on the
// paced clock, and the banner says why.
func TestAutoClock_ATimeKeeperPacesTheRun(t *testing.T) {
	t.Parallel()
	registerTimeKeeper.Do(func() { Register("k6/x/timekeeper-test", timeKeeper{}) })
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lib.js"), []byte(`
import tk from 'k6/x/timekeeper-test';
export const kept = tk;
`), 0o644))
	script := filepath.Join(dir, "script.js")
	require.NoError(t, os.WriteFile(script, []byte(`
import { sleep } from 'k6';
import { kept } from './lib.js';
export const options = { iterations: 1 };
export default function () { sleep(0.01); }
`), 0o644))
	res := runFile(t, script, auto)
	require.NoError(t, res.err, res.stderr)
	assert.Contains(t, res.stderr, "clock: paced")
	assert.Contains(t, res.stderr, "the script imports k6/x/timekeeper-test, which keeps modeled time")

	assert.Equal(t, []string{"k6", "k6/x/timekeeper-test"}, staticImports(script))
}

// TestStuckVU_DurationEndsItOnEveryClock: a VU in an endless JavaScript
// loop is ended by its scenario's duration and gracefulStop on the paced
// and virtual clocks as on the wall clock (its runtime is interrupted),
// with k6's exit code and one interrupted iteration.
func TestStuckVU_DurationEndsItOnEveryClock(t *testing.T) {
	t.Parallel()
	for _, mode := range []ClockMode{ClockVirtual, ClockPaced, ClockWall} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			done := make(chan runResult, 1)
			go func() {
				done <- runScript(t, `
import { Counter } from 'k6/metrics';
const entered = new Counter('entered');
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 1, duration: '200ms', gracefulStop: '100ms' } } };
export default function () { entered.add(1); while (true) {} }
`, func(c *Config) { c.Clock = mode })
			}()
			var res runResult
			select {
			case res = <-done:
			case <-time.After(5 * time.Minute):
				require.FailNow(t, "a VU stuck in JavaScript was never stopped")
			}
			require.NoError(t, res.err, res.stderr)
			assert.Equal(t, 1.0, res.metric(t, "entered", "count"), "the one iteration started")
			assert.Zero(t, res.metricOrZero(t, "iterations", "count"), "and was interrupted, never completed")
			if mode != ClockWall {
				assert.Contains(t, res.stderr, "without waiting on the clock")
			}
		})
	}
}
