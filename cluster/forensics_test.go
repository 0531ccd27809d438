package cluster

import (
	"log/slog"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestForensics_BoundedMemoryKeepsLongestAndRecent(t *testing.T) {
	f := newForensics(slog.New(slog.DiscardHandler))
	const n = 5000
	for i := uint64(1); i <= n; i++ {
		f.holdStarted(Hold{RequestID: i, TransferID: i, PrefillWorker: "prefill-0", DecodeWorker: "decode-0", StartMs: float64(i)})
		// Every 100th hold is long; the rest are short.
		d := 1.0
		if i%100 == 0 {
			d = 1000 + float64(i)
		}
		outcome := OutcomeAborted
		if i%2 == 1 {
			outcome = "transferred"
		}
		_, ok := f.holdEnded(i, float64(i)+d, d, outcome, outcome == "transferred")
		require.True(t, ok)
	}
	// One hold still open.
	f.holdStarted(Hold{RequestID: n + 1, StartMs: n + 1, PrefillWorker: "prefill-0", DecodeWorker: "decode-1"})

	holds := f.holds()
	assert.LessOrEqual(t, len(holds), maxForensicHolds+maxRecentHolds+1)
	byID := map[uint64]Hold{}
	for _, h := range holds {
		byID[h.RequestID] = h
	}
	for i := uint64(100); i <= n; i += 100 {
		assert.Contains(t, byID, i, "long hold %d kept", i)
	}
	for i := uint64(n - maxRecentHolds + 1); i <= n; i++ {
		assert.Contains(t, byID, i, "recent hold %d kept", i)
	}
	assert.Equal(t, "", byID[n+1].Outcome, "open hold reported")
	assert.Len(t, f.recentEvents(), maxRecentEvents)
	assert.Equal(t, EventHoldStart, f.recentEvents()[maxRecentEvents-1].Name, "events oldest first")

	graph := f.graph()
	require.Len(t, graph, 1)
	assert.Equal(t, uint64(n), graph[0].Holds)
	assert.Equal(t, uint64(n/2), graph[0].Aborted)
	assert.Equal(t, uint64(n/2), graph[0].Transferred)
	assert.InDelta(t, 1000+float64(n), graph[0].MaxMs, 1e-9)
}

func TestForensics_TransferStartAfterEndCompletesRecord(t *testing.T) {
	f := newForensics(slog.New(slog.DiscardHandler))
	f.holdStarted(Hold{RequestID: 7, TransferID: 3, StartMs: 10})
	_, ok := f.holdEnded(7, 20, 10, OutcomeAborted, false)
	require.True(t, ok)
	_, open := f.transferStarted(7, 15)
	assert.False(t, open)
	holds := f.holds()
	require.Len(t, holds, 1)
	assert.True(t, holds[0].Claimed)
	assert.Equal(t, 15.0, holds[0].TransferStartMs)
}

func TestLongestFirst_OrdersByDurationThenTransfer(t *testing.T) {
	hs := []Hold{{TransferID: 3, DurationMs: 5}, {TransferID: 2, DurationMs: 9}, {TransferID: 1, DurationMs: 5}, {TransferID: 4, DurationMs: 1}}
	got := LongestFirst(hs, 3)
	require.Len(t, got, 3)
	assert.Equal(t, []uint64{2, 1, 3}, []uint64{got[0].TransferID, got[1].TransferID, got[2].TransferID})
	assert.Len(t, LongestFirst(hs, 10), 4, "n beyond the list keeps them all")
}

// TestForensics_EdgesOfManyWorkers: an edge is found again whichever way
// the forensics looks it up (a scan while they are few, the map past
// that), so each pair of workers keeps one edge with all its holds.
func TestForensics_EdgesOfManyWorkers(t *testing.T) {
	f := newForensics(slog.New(slog.DiscardHandler))
	const pairs = 3 * scanEdges
	name := func(role string, i int) string { return role + strconv.Itoa(i) }
	for round := range 3 {
		for i := range pairs {
			e := f.edge(name("p", i%7), name("d", i))
			e.Holds++
			require.Equal(t, name("p", i%7), e.PrefillWorker)
			require.Equal(t, name("d", i), e.DecodeWorker)
			require.EqualValues(t, round+1, e.Holds, "pair %d: one edge, found again", i)
		}
	}
	g := f.graph()
	require.Len(t, g, pairs)
	for _, e := range g {
		require.EqualValues(t, 3, e.Holds)
	}
}
