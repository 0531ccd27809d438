package harness

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTimers_AsK6(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, want string
	}{
		{"timeouts fire in delay order and the iteration waits for them", `
  const out = [];
  setTimeout(() => { out.push('late'); console.log('ORDER ' + out.join(',')); }, 30);
  setTimeout((a, b) => out.push('early:' + a + b), 1, 'x', 'y');
  setTimeout(() => out.push('zero'));`, "ORDER zero,early:xy,late"},
		{"a cleared timeout never runs and does not hold the iteration", `
  const id = setTimeout(() => console.log('MUST NOT RUN'), 60 * 60 * 1000);
  clearTimeout(id);
  clearTimeout(12345); clearTimeout(undefined);
  console.log('ORDER cleared');`, "ORDER cleared"},
		{"an interval repeats until cleared", `
  let n = 0;
  const id = setInterval((step) => { n += step; if (n === 3) { clearInterval(id); console.log('ORDER ' + n); } }, 1, 1);`, "ORDER 3"},
		{"k6/timers exports the same functions", `
  timers.setTimeout(() => console.log('ORDER module'), 1);
  const id = timers.setInterval(() => {}, 1); timers.clearInterval(id);
  const t2 = timers.setTimeout(() => {}, 1000000); timers.clearTimeout(t2);`, "ORDER module"},
		{"async code awaits a timer", `
  return (async () => { await new Promise((r) => setTimeout(r, 5)); console.log('ORDER awaited'); done.add(1); })();`, "ORDER awaited"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, `
import * as timers from 'k6/timers';
import { Counter } from 'k6/metrics';
const done = new Counter('done_iterations');
export const options = { iterations: 2, thresholds: { done_iterations: ['count==2'] } };
export default function () {`+tc.body+`
  done.add(1);
}
`, nil)
			require.NoError(t, res.err, res.stderr)
			assert.Contains(t, res.stderr, tc.want)
			assert.NotContains(t, res.stderr, "MUST NOT RUN")
			assert.Equal(t, 2.0, res.metric(t, "iterations", "count"))
		})
	}
}

func TestTimers_CallbackThatThrowsFailsTheIteration(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
export const options = { iterations: 2 };
export default function () { setTimeout(() => { throw new Error('timer boom'); }, 1); setTimeout(() => console.log('AFTER'), 50); }
`, nil)
	require.NoError(t, res.err, "as in k6 an iteration error is logged, the test goes on")
	assert.Equal(t, 2, strings.Count(res.stderr, "timer boom"))
	assert.NotContains(t, res.stderr, "AFTER", "the iteration ended at the exception; its other timers were dropped")
	assert.Equal(t, 2.0, res.metric(t, "iterations", "count"))
}

func TestTimers_TakeTheirTimeFromTheClock(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
export const options = { iterations: 1 };
export default function () {
  const t0 = Date.now();
  setTimeout(() => console.log('FIVE MINUTES LATER ' + (Date.now() - t0)), 5 * 60 * 1000);
}
`, func(c *Config) { c.Clock = ClockVirtual })
	require.NoError(t, res.err, res.stderr)
	assert.Contains(t, res.stderr, "FIVE MINUTES LATER 300000", "the minutes passed on the virtual clock, not on the wall")
}
