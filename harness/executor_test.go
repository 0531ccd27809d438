package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vuTracker is a script fragment that records, per VU, how many iterations
// it started, through a Counter tagged with the VU id, and at the end of the
// test how many iterations were interrupted (teardown runs after every
// scenario, so the count is final).
const vuTracker = `
import { Counter } from 'k6/metrics';
import { sleep } from 'k6';
import exec from 'k6/execution';
const perVU = new Counter('per_vu');
const interrupted = new Counter('interrupted');
export function teardown() { interrupted.add(exec.instance.iterationsInterrupted); }
`

func TestExecutor_SharedIterations_RunsExactlyTheTotal(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'shared-iterations', vus: 3, iterations: 17 } } };
export default function () { perVU.add(1); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 17.0, res.metric(t, "iterations", "count"))
	assert.Equal(t, 17.0, res.metric(t, "per_vu", "count"))
	assert.Equal(t, 0.0, res.metricOrZero(t, "dropped_iterations", "count"), "nothing is dropped without maxDuration")
	assert.Equal(t, 3.0, res.metric(t, "vus_max", "value"))
}

func TestExecutor_PerVUIterations_EachVURunsN(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = {
  scenarios: { s: { executor: 'per-vu-iterations', vus: 4, iterations: 5 } },
  thresholds: { 'per_vu{vu_id:1}': ['count==5'], 'per_vu{vu_id:4}': ['count==5'] },
};
export default function () { perVU.add(1, { vu_id: String(exec.vu.idInTest) }); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 20.0, res.metric(t, "iterations", "count"))
}

func TestExecutor_PerVUIterations_MaxDurationDropsTheRest(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'per-vu-iterations', vus: 2, iterations: 1000, maxDuration: '150ms', gracefulStop: '0s' } } };
export default function () { sleep(0.02); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	done := res.metricOrZero(t, "iterations", "count")
	dropped := res.metric(t, "dropped_iterations", "count")
	// Each iteration sleeps 20ms and none starts after 150ms, so a VU
	// starts at most 8 (at 0, 20, ..., 140ms at the earliest).
	assert.LessOrEqual(t, done, 16.0)
	// Every planned iteration was completed, interrupted or dropped.
	assert.Equal(t, 2000.0, done+dropped+res.metric(t, "interrupted", "count"))
}

func TestExecutor_ConstantVUs_LoopsForTheDuration(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 2, duration: '300ms' } } };
export default function () { perVU.add(1); sleep(0.05); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	n := res.metricOrZero(t, "iterations", "count")
	// Each iteration sleeps 50ms and none starts after 300ms, so a VU
	// starts at most 6 (at 0, 50, ..., 250ms at the earliest). A slow
	// machine does fewer; the 30s gracefulStop lets every one finish.
	assert.LessOrEqual(t, n, 12.0)
	assert.Equal(t, n, res.metricOrZero(t, "per_vu", "count"), "every started iteration completes")
	assert.Equal(t, 0.0, res.metric(t, "interrupted", "count"))
	if n > 0 {
		assert.GreaterOrEqual(t, res.metric(t, "iteration_duration", "min"), 50.0, "an iteration lasts at least its sleep")
	}
	assert.Equal(t, 2.0, res.metric(t, "vus_max", "value"))
}

func TestExecutor_ConstantVUs_GracefulStopInterruptsLongIterations(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 1, duration: '50ms', gracefulStop: '50ms' } } };
export default function () { perVU.add(1); sleep(10); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	// The iteration started (if the VU got to it at all) is cut short by
	// gracefulStop, long before its sleep ends, so none completes.
	started := res.metricOrZero(t, "per_vu", "count")
	assert.LessOrEqual(t, started, 1.0)
	assert.Equal(t, started, res.metric(t, "interrupted", "count"))
	assert.Equal(t, 0.0, res.metricOrZero(t, "iterations", "count"))
}

func TestExecutor_RampingVUs_FollowsTheStages(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = {
  scenarios: { s: { executor: 'ramping-vus', startVUs: 0, gracefulRampDown: '0s',
    stages: [{ duration: '200ms', target: 4 }, { duration: '200ms', target: 4 }, { duration: '100ms', target: 0 }] } },
  thresholds: { 'per_vu{vu_id:1}': [], 'per_vu{vu_id:2}': [], 'per_vu{vu_id:3}': [], 'per_vu{vu_id:4}': [] },
};
export default function () { perVU.add(1, { vu_id: String(exec.vu.idInTest) }); sleep(0.02); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 4.0, res.metric(t, "vus_max", "value"))
	// VU i joins once the target reaches i, at i×50ms, and none starts an
	// iteration after 500ms; each iteration sleeps 20ms. So VU i starts at
	// most ceil((500 - 50i) / 20) iterations: a VU that joined too early
	// runs more.
	for i, most := range []float64{23, 20, 18, 15} {
		name := fmt.Sprintf("per_vu{vu_id:%d}", i+1)
		assert.LessOrEqual(t, res.metricOrZero(t, name, "count"), most, name)
	}
	// Every iteration started either completed or was interrupted by the
	// ramp-down (an interrupted one may stop before it records its start).
	n := res.metricOrZero(t, "iterations", "count")
	started := res.metricOrZero(t, "per_vu", "count")
	assert.LessOrEqual(t, n, started)
	assert.LessOrEqual(t, started, n+res.metric(t, "interrupted", "count"))
}

// The arrival-rate executors plan their starts from the rate alone, so the
// plan's size is known; however slow the machine, every planned start is
// either an iteration or a dropped one. The iterations here cannot be
// interrupted (gracefulStop outlasts them), so the sums are exact.

func TestExecutor_ConstantArrivalRate_StartsAtTheRate(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'constant-arrival-rate', rate: 50, timeUnit: '1s', duration: '400ms', preAllocatedVUs: 4 } } };
export default function () {}
`, nil)
	require.NoError(t, res.err, res.stderr)
	// 50/s over 400ms: starts at 0, 20, ..., 380ms
	assert.Equal(t, 20.0, res.metricOrZero(t, "iterations", "count")+res.metricOrZero(t, "dropped_iterations", "count"))
	assert.Equal(t, 0.0, res.metric(t, "interrupted", "count"))
}

func TestExecutor_RampingArrivalRate_FollowsTheRateIntegral(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'ramping-arrival-rate', startRate: 0, timeUnit: '1s', preAllocatedVUs: 4,
  stages: [{ duration: '400ms', target: 100 }, { duration: '200ms', target: 100 }] } } };
export default function () {}
`, nil)
	require.NoError(t, res.err, res.stderr)
	// ∫ rate = 0.4s × 100/2 + 0.2s × 100 = 40 starts
	total := res.metricOrZero(t, "iterations", "count") + res.metricOrZero(t, "dropped_iterations", "count")
	assert.Equal(t, 40.0, total)
	assert.Equal(t, 0.0, res.metric(t, "interrupted", "count"))
}

func TestExecutor_ArrivalRate_StartsJustBeforeTheEndAreAccounted(t *testing.T) {
	t.Parallel()
	// The rate is 0 for 100ms (the plan's first start is at 0), then ramps
	// to 6M/s within the last microsecond: 6e6/s × 1µs / 2 = 3 starts, the
	// last two inside that microsecond. The loop wakes for them about when
	// the scenario ends, usually after it, and must then drop both.
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'ramping-arrival-rate', startRate: 0, timeUnit: '1s', preAllocatedVUs: 3,
  stages: [{ duration: '100ms', target: 0 }, { duration: '1us', target: 6000000 }] } } };
export default function () {}
`, nil)
	require.NoError(t, res.err, res.stderr)
	total := res.metricOrZero(t, "iterations", "count") + res.metricOrZero(t, "dropped_iterations", "count")
	assert.Equal(t, 3.0, total, "starts the loop woke for too late count as dropped")
}

func TestExecutor_ArrivalRate_DropsWhenVUsRunOut(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'constant-arrival-rate', rate: 50, timeUnit: '1s', duration: '400ms',
  preAllocatedVUs: 1, maxVUs: 1, gracefulStop: '1s' } } };
export default function () { sleep(0.5); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	done := res.metricOrZero(t, "iterations", "count")
	dropped := res.metric(t, "dropped_iterations", "count")
	// The one VU is busy for 500ms with the first start it takes, longer
	// than the whole 400ms, so it takes at most one of the 20.
	assert.LessOrEqual(t, done, 1.0)
	assert.Equal(t, 20.0, done+dropped)
	assert.Equal(t, 0.0, res.metric(t, "interrupted", "count"))
	assert.Contains(t, res.stderr, "Insufficient VUs")
}

func TestExecutor_StartTimeDelaysAScenario(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = {
  scenarios: {
    early: { executor: 'per-vu-iterations', exec: 'mark' },
    late: { executor: 'per-vu-iterations', startTime: '100ms', exec: 'mark' },
  },
};
let first = 0;
export function mark() { perVU.add(1, { scenario_seen: exec.scenario.name }); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 2.0, res.metric(t, "iterations", "count"))
}

func TestRunning_StopsAtTheDeadlineEvenBeforeTheContextKnows(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		end  time.Time
		ctx  context.Context
		want bool
	}{
		{"no deadline", time.Time{}, context.Background(), true},
		{"deadline ahead", time.Now().Add(time.Hour), context.Background(), true},
		{"deadline passed, timer late", time.Now().Add(-time.Millisecond), context.Background(), false},
		{"cancelled", time.Time{}, cancelled, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &scenarioRun{t: &testRun{clock: WallClock{}}, regularEnd: tc.end}
			assert.Equal(t, tc.want, s.running(tc.ctx))
		})
	}
}
