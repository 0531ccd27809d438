package xk6mocker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/harness"
)

// TestVirtual_VUsBlockedEveryWayAtOnce: VUs in sleep, in generate, awaiting
// generateAsync, in cluster.sleep and waiting for arrival-rate starts, all
// at once on the virtual clock: the run ends, every scenario does exactly
// its planned iterations (the thresholds say so), and a second run writes
// the same summary byte for byte.
func TestVirtual_VUsBlockedEveryWayAtOnce(t *testing.T) {
	var exports [2][]byte
	for i := range exports {
		path := filepath.Join(t.TempDir(), "summary.json")
		res := runScriptWith(t, "virtual_mix.js", nil, func(c *harness.Config) {
			c.VirtualClock = true
			c.SummaryExport = path
		})
		require.Equal(t, 0, res.code, "stderr: %s\n%s", res.stderr, res.stdout)
		require.Len(t, res.clusters, 1)
		st := res.clusters[0].stats
		assert.Positive(t, st.Pins)
		assert.Equal(t, st.Requests, st.Completed+st.Aborted+st.Rejected+st.Errored)
		var err error
		exports[i], err = os.ReadFile(path)
		require.NoError(t, err)
	}
	assert.Equal(t, string(exports[0]), string(exports[1]))
}
