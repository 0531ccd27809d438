package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteSweep_DrawsThePointsAndMarksTheFront(t *testing.T) {
	t.Parallel()
	pts := []SweepPoint{
		{Label: "prefill.workers=1", GPUs: 2, GoodputPerGPU: 3, TTFTP90Ms: 900, Pareto: true, Holds: 10, Aborted: 4, PeakHeldBlocks: 77},
		{Label: "prefill.workers=2", GPUs: 3, GoodputPerGPU: 2.5, TTFTP90Ms: 100, Pareto: true},
		{Label: "prefill.workers=3", GPUs: 4, GoodputPerGPU: 1, TTFTP90Ms: 120},
		{Label: "prefill.workers=0", Error: "prefill.workers: want an integer in [1, 1024], got 0"},
	}
	var b bytes.Buffer
	require.NoError(t, WriteSweep(&b, "t.jsonl", pts))
	page := b.String()
	assert.Equal(t, 1, strings.Count(page, "<svg"), "one chart")
	assert.Equal(t, 2, strings.Count(page, `class="front"`), "the two rows on the front")
	assert.Contains(t, page, "want an integer in [1, 1024], got 0", "a refused configuration shows why")
	assert.Contains(t, page, "<td>77</td>", "the stranding figures")
	assert.NotContains(t, page, "<script")
	var empty bytes.Buffer
	require.NoError(t, WriteSweep(&empty, "", pts[3:]))
	assert.NotContains(t, empty.String(), "<svg", "no chart without a point")
}
