package harness

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const segmentScript = `
export const options = {
  scenarios: {
    shared: { executor: 'shared-iterations', vus: 4, iterations: 20 },
    pervu: { executor: 'per-vu-iterations', vus: 5, iterations: 3 },
    rate: { executor: 'constant-arrival-rate', rate: 30, timeUnit: '1s', duration: '1s', preAllocatedVUs: 4 },
  },
  thresholds: {
    'iterations{scenario:shared}': ['count>0'],
    'iterations{scenario:pervu}': ['count>0'],
    'iterations{scenario:rate}': ['count>=0'],
    'dropped_iterations{scenario:rate}': ['count>=0'],
  },
};
export default function () {}
`

// TestSegments_ThreeSegmentsAddUpToTheWholeTest runs one script whole and
// as the three segments of 0,1/3,2/3,1: per scenario, the segments'
// iterations (and, for the arrival rate, started plus dropped
// iterations) sum to the whole run's, and so do their VUs.
func TestSegments_ThreeSegmentsAddUpToTheWholeTest(t *testing.T) {
	t.Parallel()
	count := func(r runResult, key string) float64 {
		v, _ := exportValue(r.summary, "metrics/"+key+"/count")
		return v
	}
	whole := runScript(t, segmentScript, nil)
	require.NoError(t, whole.err, whole.stderr)
	sums := map[string]float64{}
	keys := []string{"iterations{scenario:shared}", "iterations{scenario:pervu}"}
	for _, seg := range []string{"0:1/3", "1/3:2/3", "2/3:1"} {
		res := runScript(t, segmentScript, func(c *Config) {
			c.ExecutionSegment, c.ExecutionSegmentSequence = seg, "0,1/3,2/3,1"
		})
		require.NoError(t, res.err, "segment %s: %s", seg, res.stderr)
		for _, k := range keys {
			sums[k] += count(res, k)
		}
		sums["rate plan"] += count(res, "iterations{scenario:rate}") + count(res, "dropped_iterations{scenario:rate}")
		sums["vus_max"] += res.metric(t, "vus_max", "value")
		assert.Less(t, count(res, "iterations{scenario:shared}"), 20.0, "segment %s runs only its share", seg)
	}
	assert.Equal(t, 20.0, sums["iterations{scenario:shared}"])
	assert.Equal(t, 15.0, sums["iterations{scenario:pervu}"])
	for _, k := range keys {
		assert.Equal(t, count(whole, k), sums[k], k)
	}
	assert.Equal(t, 30.0, sums["rate plan"])
	assert.Equal(t, count(whole, "iterations{scenario:rate}")+count(whole, "dropped_iterations{scenario:rate}"), sums["rate plan"])
	assert.Equal(t, whole.metric(t, "vus_max", "value"), sums["vus_max"])
}

func TestSegments_OptionKeysWork(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
export const options = { executionSegment: '1/2:1', scenarios: { s: { executor: 'per-vu-iterations', vus: 4, iterations: 2 } } };
export default function () {}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 4.0, res.metric(t, "iterations", "count"), "2 of the 4 VUs, 2 iterations each")
}

func TestSegments_InvalidSegmentIsAConfigError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ seg, seq, want string }{
		{"2/3:1/3", "", "from < to"},
		{"0:1/4", "0,1/3,1", "not one of the sequence's segments"},
		{"0:1/3", "0,1/3", "from 0 to 1"},
	} {
		res := runScript(t, `export default function () {}`, func(c *Config) {
			c.ExecutionSegment, c.ExecutionSegmentSequence = tc.seg, tc.seq
		})
		require.Equal(t, ExitInvalidConfig, ExitCode(res.err), "%s in %s", tc.seg, tc.seq)
		assert.Contains(t, res.err.Error(), tc.want)
	}
}
