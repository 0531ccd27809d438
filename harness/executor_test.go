package harness

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vuTracker is a script fragment that records, per VU, how many iterations
// it ran, through a Counter tagged with the VU id.
const vuTracker = `
import { Counter } from 'k6/metrics';
import { sleep } from 'k6';
import exec from 'k6/execution';
const perVU = new Counter('per_vu');
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
	assert.Equal(t, 0.0, res.metric(t, "dropped_iterations", "count"))
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
	done := res.metric(t, "iterations", "count")
	dropped := res.metric(t, "dropped_iterations", "count")
	assert.Greater(t, done, 2.0)
	assert.Less(t, done, 40.0)
	// every planned iteration was either completed, interrupted (at most one
	// per VU) or dropped
	assert.InDelta(t, 2000.0, done+dropped, 2)
}

func TestExecutor_ConstantVUs_LoopsForTheDuration(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 2, duration: '300ms' } } };
export default function () { sleep(0.05); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	n := res.metric(t, "iterations", "count")
	// 2 VUs × 300ms / 50ms = 12 when timing is perfect; slow machines do fewer
	assert.GreaterOrEqual(t, n, 4.0)
	assert.LessOrEqual(t, n, 14.0)
	assert.Equal(t, 2.0, res.metric(t, "vus_max", "value"))
}

func TestExecutor_ConstantVUs_GracefulStopInterruptsLongIterations(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 1, duration: '50ms', gracefulStop: '50ms' } } };
export default function () { sleep(10); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	// the only iteration was interrupted, so none counts
	assert.Equal(t, 0.0, res.metric(t, "iterations", "count"))
}

func TestExecutor_RampingVUs_FollowsTheStages(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = {
  scenarios: { s: { executor: 'ramping-vus', startVUs: 0, gracefulRampDown: '0s',
    stages: [{ duration: '200ms', target: 4 }, { duration: '200ms', target: 4 }, { duration: '100ms', target: 0 }] } },
  thresholds: { 'per_vu{vu_id:1}': [], 'per_vu{vu_id:4}': [] },
};
export default function () { perVU.add(1, { vu_id: String(exec.vu.idInTest) }); sleep(0.02); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 4.0, res.metric(t, "vus_max", "value"))
	first := res.metric(t, "per_vu{vu_id:1}", "count")
	last := res.metric(t, "per_vu{vu_id:4}", "count")
	// VU 1 joins first and VU 4 last, so VU 1 runs more iterations
	assert.Greater(t, first, 0.0)
	assert.Greater(t, last, 0.0)
	assert.Greater(t, first, last)
	n := res.metric(t, "iterations", "count")
	assert.Greater(t, n, 10.0)
	assert.Less(t, n, 100.0)
}

func TestExecutor_ConstantArrivalRate_StartsAtTheRate(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'constant-arrival-rate', rate: 50, timeUnit: '1s', duration: '400ms', preAllocatedVUs: 4 } } };
export default function () {}
`, nil)
	require.NoError(t, res.err, res.stderr)
	// 50/s over 400ms: starts at 0, 20, ..., 380ms
	assert.Equal(t, 20.0, res.metric(t, "iterations", "count")+res.metric(t, "dropped_iterations", "count"))
	assert.GreaterOrEqual(t, res.metric(t, "iterations", "count"), 15.0)
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
	total := res.metric(t, "iterations", "count") + res.metric(t, "dropped_iterations", "count")
	assert.InDelta(t, 40.0, total, 1)
}

func TestExecutor_ArrivalRate_DropsWhenVUsRunOut(t *testing.T) {
	t.Parallel()
	res := runScript(t, vuTracker+`
export const options = { scenarios: { s: { executor: 'constant-arrival-rate', rate: 50, timeUnit: '1s', duration: '400ms',
  preAllocatedVUs: 1, maxVUs: 1, gracefulStop: '1s' } } };
export default function () { sleep(0.1); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	done := res.metric(t, "iterations", "count")
	dropped := res.metric(t, "dropped_iterations", "count")
	// one VU busy 100ms per iteration can take about 4 of the 20 starts
	assert.GreaterOrEqual(t, done, 2.0)
	assert.LessOrEqual(t, done, 6.0)
	assert.Equal(t, 20.0, done+dropped)
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

func TestRampingTarget_InterpolatesBetweenStages(t *testing.T) {
	t.Parallel()
	stages := []Stage{{Duration: 100 * time.Millisecond, Target: 10}, {Duration: 0, Target: 3}, {Duration: 100 * time.Millisecond, Target: 0}}
	tests := []struct {
		at   time.Duration
		want int64
	}{
		{0, 0}, {50 * time.Millisecond, 5}, {99 * time.Millisecond, 9},
		{100 * time.Millisecond, 3}, {150 * time.Millisecond, 2}, {250 * time.Millisecond, 0},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.at), func(t *testing.T) {
			assert.Equal(t, tc.want, rampingTarget(0, stages, tc.at))
		})
	}
}

func TestArrivalSchedule_CountsMatchTheRateIntegral(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sc   Scenario
		want int
	}{
		{"constant", Scenario{Executor: ExecConstantArrival, Rate: 10, TimeUnit: time.Second, Duration: 2 * time.Second}, 20},
		{"constant per minute", Scenario{Executor: ExecConstantArrival, Rate: 120, TimeUnit: time.Minute, Duration: 3 * time.Second}, 6},
		{"ramp up", Scenario{Executor: ExecRampingArrivalRate, StartRate: 0, TimeUnit: time.Second,
			Stages: []Stage{{Duration: 2 * time.Second, Target: 10}}}, 10},
		{"ramp down then hold", Scenario{Executor: ExecRampingArrivalRate, StartRate: 20, TimeUnit: time.Second,
			Stages: []Stage{{Duration: time.Second, Target: 0}, {Duration: time.Second, Target: 0}, {Duration: time.Second, Target: 5}}}, 13},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newArrivalSchedule(&tc.sc)
			n := 0
			var prev time.Duration
			for {
				off, ok := s.next()
				if !ok {
					break
				}
				require.GreaterOrEqual(t, off, prev, "start times must not go backwards")
				require.Less(t, off, tc.sc.totalDuration())
				prev = off
				n++
			}
			assert.InDelta(t, tc.want, n, 1)
		})
	}
}
