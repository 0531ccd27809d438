package options

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseOptions_RejectsBadConfigNamingTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, json, want string
	}{
		{"unknown executor", `{"scenarios":{"a":{"executor":"externally-controlled"}}}`, `scenarios.a.executor: unknown executor "externally-controlled"`},
		{"missing executor", `{"scenarios":{"a":{"vus":1}}}`, `scenarios.a.executor: required`},
		{"unknown field", `{"scenarios":{"a":{"executor":"constant-vus","duration":"1s","rate":3}}}`, `scenarios.a.rate: unknown field`},
		{"negative vus", `{"scenarios":{"a":{"executor":"constant-vus","vus":-1,"duration":"1s"}}}`, `scenarios.a.vus: want an integer in [0, 9007199254740992], got -1`},
		{"missing duration", `{"scenarios":{"a":{"executor":"constant-vus","vus":1}}}`, `scenarios.a.duration: required`},
		{"bad stage duration", `{"scenarios":{"ramp":{"executor":"ramping-vus","stages":[{"duration":"1s","target":1},{"duration":"5x","target":0}]}}}`, `scenarios.ramp.stages[1].duration: invalid duration "5x"`},
		{"stage without target", `{"scenarios":{"r":{"executor":"ramping-vus","stages":[{"duration":"1s"}]}}}`, `scenarios.r.stages[0].target: required`},
		{"iterations below vus", `{"scenarios":{"s":{"executor":"shared-iterations","vus":5,"iterations":2}}}`, `scenarios.s.iterations: must be at least vus`},
		{"missing rate", `{"scenarios":{"c":{"executor":"constant-arrival-rate","duration":"1s","preAllocatedVUs":1}}}`, `scenarios.c.rate: required`},
		{"missing preAllocatedVUs", `{"scenarios":{"c":{"executor":"constant-arrival-rate","rate":1,"duration":"1s"}}}`, `scenarios.c.preAllocatedVUs: required`},
		{"maxVUs below preAllocated", `{"scenarios":{"c":{"executor":"ramping-arrival-rate","preAllocatedVUs":3,"maxVUs":1,"stages":[{"duration":"1s","target":1}]}}}`, `scenarios.c.maxVUs: must be at least preAllocatedVUs`},
		{"negative gracefulStop", `{"scenarios":{"a":{"executor":"per-vu-iterations","gracefulStop":"-1s"}}}`, `scenarios.a.gracefulStop: must not be negative`},
		{"empty exec", `{"scenarios":{"a":{"executor":"per-vu-iterations","exec":""}}}`, `scenarios.a.exec: must not be empty`},
		{"bad scenario name", `{"scenarios":{"a b":{"executor":"per-vu-iterations"}}}`, `scenarios.a b: scenario names`},
		{"shortcut with scenarios", `{"duration":"1s","scenarios":{"a":{"executor":"per-vu-iterations"}}}`, `cannot be combined with scenarios`},
		{"iterations with stages", `{"iterations":3,"stages":[{"duration":"1s","target":1}]}`, `iterations and stages cannot be combined`},
		{"zero duration", `{"duration":"0s"}`, `options.duration: must be positive`},
		{"bad trend stat", `{"summaryTrendStats":["avg","p(101)"]}`, `summaryTrendStats`},
		{"bad threshold item", `{"thresholds":{"iterations":[{"threshold":"count>1","abortOnFail":"yes"}]}}`, `abortOnFail: want a boolean`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.json), Overrides{})
			var cfgErr *Error
			require.ErrorAs(t, err, &cfgErr)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestParseOptions_Shortcuts(t *testing.T) {
	t.Parallel()
	i64 := func(v int64) *int64 { return &v }
	dur := func(d time.Duration) *time.Duration { return &d }
	tests := []struct {
		name     string
		json     string
		ov       Overrides
		executor string
		check    func(t *testing.T, sc *Scenario)
	}{
		{"nothing", `{}`, Overrides{}, ExecPerVUIterations, func(t *testing.T, sc *Scenario) {
			assert.Equal(t, int64(1), sc.VUs)
			assert.Equal(t, int64(1), sc.Iterations)
		}},
		{"vus alone", `{"vus":3}`, Overrides{}, ExecSharedIterations, func(t *testing.T, sc *Scenario) {
			assert.Equal(t, int64(3), sc.Iterations)
		}},
		{"iterations with duration", `{"vus":2,"iterations":10,"duration":"5s"}`, Overrides{}, ExecSharedIterations, func(t *testing.T, sc *Scenario) {
			assert.Equal(t, 5*time.Second, sc.MaxDuration)
		}},
		{"duration", `{"vus":4,"duration":"2s"}`, Overrides{}, ExecConstantVUs, func(t *testing.T, sc *Scenario) {
			assert.Equal(t, int64(4), sc.VUs)
		}},
		{"stages", `{"vus":2,"stages":[{"duration":"1s","target":5}]}`, Overrides{}, ExecRampingVUs, func(t *testing.T, sc *Scenario) {
			assert.Equal(t, int64(2), sc.StartVUs)
			assert.Equal(t, int64(5), sc.PeakVUs())
		}},
		{"CLI duration replaces scenarios", `{"scenarios":{"x":{"executor":"per-vu-iterations"}}}`, Overrides{Duration: dur(time.Second), VUs: i64(3)}, ExecConstantVUs, func(t *testing.T, sc *Scenario) {
			assert.Equal(t, "default", sc.Name)
			assert.Equal(t, int64(3), sc.VUs)
		}},
		{"CLI vus override options vus", `{"vus":1,"duration":"1s"}`, Overrides{VUs: i64(6)}, ExecConstantVUs, func(t *testing.T, sc *Scenario) {
			assert.Equal(t, int64(6), sc.VUs)
		}},
		{"numeric durations are milliseconds", `{"scenarios":{"a":{"executor":"constant-vus","duration":1500}}}`, Overrides{}, ExecConstantVUs, func(t *testing.T, sc *Scenario) {
			assert.Equal(t, 1500*time.Millisecond, sc.Duration)
			assert.Equal(t, 30*time.Second, sc.GracefulStop)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := Parse([]byte(tc.json), tc.ov)
			require.NoError(t, err)
			require.Len(t, opts.Scenarios, 1)
			assert.Equal(t, tc.executor, opts.Scenarios[0].Executor)
			tc.check(t, opts.Scenarios[0])
		})
	}
}

func TestParseOptions_ThresholdForms(t *testing.T) {
	t.Parallel()
	opts, err := Parse([]byte(`{"thresholds":{"a":["count>1"],"b":"rate>0.5","c":[{"threshold":"p(95)<10","abortOnFail":true,"delayAbortEval":"10s"}]}}`), Overrides{})
	require.NoError(t, err)
	assert.Equal(t, "count>1", opts.Thresholds["a"][0].Source)
	assert.Equal(t, "rate>0.5", opts.Thresholds["b"][0].Source)
	c := opts.Thresholds["c"][0]
	assert.True(t, c.AbortOnFail)
	assert.Equal(t, 10*time.Second, c.DelayAbortEval)
}
