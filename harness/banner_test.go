package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kvstrand/mocker/harness/options"
)

func TestScenario_DescriptionPerExecutor(t *testing.T) {
	t.Parallel()
	const gs = 30 * time.Second
	tests := []struct {
		name string
		sc   options.Scenario
		want string
	}{
		{"shared-iterations",
			options.Scenario{Executor: options.ExecSharedIterations, VUs: 2, Iterations: 10, MaxDuration: 10 * time.Minute, GracefulStop: gs, Exec: "default"},
			"10 iterations shared among 2 VUs (maxDuration: 10m, gracefulStop: 30s)"},
		{"per-vu-iterations, singular nouns",
			options.Scenario{Executor: options.ExecPerVUIterations, VUs: 1, Iterations: 1, MaxDuration: 90 * time.Second, Exec: "default"},
			"1 iteration for each of 1 VU (maxDuration: 1m30s, gracefulStop: 0s)"},
		{"constant-vus with startTime and exec",
			options.Scenario{Executor: options.ExecConstantVUs, VUs: 5, Duration: time.Minute, StartTime: 10 * time.Second, GracefulStop: gs, Exec: "browse"},
			"5 looping VUs for 1m (startTime: 10s, gracefulStop: 30s, exec: browse)"},
		{"ramping-vus",
			options.Scenario{Executor: options.ExecRampingVUs, StartVUs: 1, GracefulRampDown: 5 * time.Second, GracefulStop: gs, Exec: "default",
				Stages: []options.Stage{{Duration: 5600 * time.Millisecond, Target: 16}, {Duration: 7200 * time.Millisecond, Target: 16}, {Duration: 3200 * time.Millisecond, Target: 0}}},
			"Up to 16 looping VUs for 16s over 3 stages (gracefulRampDown: 5s, gracefulStop: 30s)"},
		{"ramping-vus that starts at its peak",
			options.Scenario{Executor: options.ExecRampingVUs, StartVUs: 8, GracefulRampDown: gs, GracefulStop: gs, Exec: "default",
				Stages: []options.Stage{{Duration: time.Hour, Target: 2}}},
			"Up to 8 looping VUs for 1h over 1 stage (gracefulRampDown: 30s, gracefulStop: 30s)"},
		{"constant-arrival-rate per minute",
			options.Scenario{Executor: options.ExecConstantArrival, Rate: 30, TimeUnit: time.Minute, Duration: 2 * time.Minute,
				PreAllocatedVUs: 5, MaxVUs: 5, GracefulStop: gs, Exec: "default"},
			"0.5 iterations/s for 2m (maxVUs: 5, gracefulStop: 30s)"},
		{"constant-arrival-rate with VUs added on demand",
			options.Scenario{Executor: options.ExecConstantArrival, Rate: 1, TimeUnit: 3 * time.Second, Duration: 45 * time.Second,
				PreAllocatedVUs: 2, MaxVUs: 10, GracefulStop: gs, Exec: "default"},
			"0.33 iterations/s for 45s (preAllocatedVUs: 2, maxVUs: 10, gracefulStop: 30s)"},
		{"constant-arrival-rate slower than one a minute",
			options.Scenario{Executor: options.ExecConstantArrival, Rate: 1, TimeUnit: time.Hour, Duration: 3 * time.Hour,
				PreAllocatedVUs: 1, MaxVUs: 1, GracefulStop: gs, Exec: "default"},
			"0.00028 iterations/s for 3h (maxVUs: 1, gracefulStop: 30s)"},
		{"ramping-arrival-rate peaks at its start rate",
			options.Scenario{Executor: options.ExecRampingArrivalRate, StartRate: 50, TimeUnit: time.Second, PreAllocatedVUs: 20, MaxVUs: 20,
				GracefulStop: gs, Exec: "default", Stages: []options.Stage{{Duration: 30 * time.Minute, Target: 10}, {Duration: 90 * time.Minute, Target: 20}}},
			"Up to 50 iterations/s for 2h over 2 stages (maxVUs: 20, gracefulStop: 30s)"},
		{"ramping-arrival-rate peaks at a stage target",
			options.Scenario{Executor: options.ExecRampingArrivalRate, StartRate: 0, TimeUnit: time.Second, PreAllocatedVUs: 4, MaxVUs: 40,
				GracefulStop: 0, StartTime: time.Minute, Exec: "checkout", Stages: []options.Stage{{Duration: 10 * time.Second, Target: 200}}},
			"Up to 200 iterations/s for 10s over 1 stage (preAllocatedVUs: 4, maxVUs: 40, startTime: 1m, gracefulStop: 0s, exec: checkout)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, describeScenario(&tc.sc))
		})
	}
}

func TestScenariosHeadline_CountsVUsAndTheLatestHardStop(t *testing.T) {
	t.Parallel()
	one := []*options.Scenario{{Executor: options.ExecConstantVUs, VUs: 1, Duration: 16 * time.Second, GracefulStop: 30 * time.Second}}
	assert.Equal(t, "1 scenario, 1 max VU, 46s max duration (incl. graceful stop)", scenariosHeadline(one))

	two := []*options.Scenario{
		{Executor: options.ExecConstantVUs, VUs: 10, Duration: time.Minute, GracefulStop: 30 * time.Second},
		// starts after the first and ends last: 1m + 2m + 10s
		{Executor: options.ExecSharedIterations, VUs: 4, Iterations: 8, MaxDuration: 2 * time.Minute, StartTime: time.Minute, GracefulStop: 10 * time.Second},
	}
	assert.Equal(t, "2 scenarios, 14 max VUs, 3m10s max duration (incl. graceful stop)", scenariosHeadline(two))
}

func TestOutputsDescription(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		outputs       []string
		summaryExport string
		want          string
	}{
		{"nothing besides the summary", nil, "", "-"},
		{"json", []string{"json=samples.json.gz"}, "", "json (samples.json.gz)"},
		{"json and summary export", []string{"json=a.json"}, "out/summary.json", "json (a.json), summary export (out/summary.json)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, outputsDescription(tc.outputs, tc.summaryExport))
		})
	}
}

func TestBannerDur_DropsZeroUnits(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                            "0s",
		10 * time.Second:             "10s",
		5600 * time.Millisecond:      "5.6s",
		10 * time.Minute:             "10m",
		90 * time.Second:             "1m30s",
		time.Hour:                    "1h",
		time.Hour + 10*time.Minute:   "1h10m",
		time.Hour + 10*time.Second:   "1h0m10s",
		250 * time.Millisecond:       "250ms",
		2*time.Hour + 30*time.Minute: "2h30m",
	} {
		assert.Equal(t, want, bannerDur(d), "%v", d)
	}
}

// TestBanner_NamesTheBuildFirstWhenGiven: Config.Version opens the start
// banner on a line of its own; without it the banner starts at the script.
func TestBanner_NamesTheBuildFirstWhenGiven(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version, first string
	}{
		{"mocker v1.2.3, go1.26.0", "    version: mocker v1.2.3, go1.26.0\n"},
		{"", "     script: s.js\n"},
	} {
		tr := &testRun{cfg: Config{Script: "s.js", Version: tc.version}, opts: &options.Options{}}
		var b strings.Builder
		tr.writeBanner(&b)
		first, _, _ := strings.Cut(b.String(), "\n")
		assert.Equal(t, tc.first, first+"\n")
		assert.Contains(t, b.String(), "     script: s.js\n")
	}
}
