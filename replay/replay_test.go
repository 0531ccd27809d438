package replay

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

func aggregated(blockSize int) cluster.Config {
	return cluster.Config{Workers: 1, Seed: 1, Args: map[string]any{"block_size": blockSize, "num_gpu_blocks": 2048}}
}

func disagg() cluster.Config {
	return cluster.Config{Disagg: true, Router: "kv", Seed: 1,
		Args: map[string]any{"num_gpu_blocks": 4096, "max_num_seqs": 64,
			"kv_transfer_abort_timeout_ms": 2000, "kv_bytes_per_token": 131072, "kv_transfer_bandwidth": 25},
		Prefill: cluster.PoolConfig{Workers: 2}, Decode: cluster.PoolConfig{Workers: 2}}
}

func open(t *testing.T, path string) *Reader {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	tr, err := NewReader(f)
	require.NoError(t, err)
	return tr
}

func replayFile(t *testing.T, cfg cluster.Config, path string, opts Options) (Output, []RequestEnd) {
	t.Helper()
	var ends []RequestEnd
	opts.OnRequest = func(e RequestEnd) { ends = append(ends, e) }
	out, err := Run(cfg, open(t, path), opts)
	require.NoError(t, err)
	return out, ends
}

func TestReplay_SharedHashIDsHitTheCacheTheBlocksSay(t *testing.T) {
	t.Parallel()
	// Four requests 500 ms apart, each the same 4 hash ids of 512 tokens
	// (2,048 tokens); each ends before the next arrives. The first finds
	// nothing; each later one finds every full engine block of the prompt
	// but the one holding its last token, which vLLM recomputes.
	const n, prompt = 4, 2048
	for _, bs := range []int{16, 32, 64} {
		out, ends := replayFile(t, aggregated(bs), "testdata/shared.jsonl", Options{})
		require.Len(t, ends, n)
		for _, e := range ends {
			require.Equal(t, cluster.OutcomeCompleted, e.Result.Outcome, e.Result.Error)
		}
		perHit := (prompt - 1) / bs * bs
		s := out.Summary
		assert.Equal(t, uint64((n-1)*perHit), s.CachedTokens, "block size %d", bs)
		assert.Equal(t, uint64(n*prompt), s.PrefilledTokens)
		assert.InDelta(t, float64((n-1)*perHit)/float64(n*prompt), s.PrefixCacheHitRate, 1e-12, "block size %d", bs)
	}
}

func TestReplay_SessionTurnWaitsForTheTurnBeforeAndItsDelay(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"testdata/sessions.jsonl", "testdata/sessions.jsonl.gz"} {
		out, ends := replayFile(t, disagg(), path, Options{})
		require.Len(t, ends, 6)
		// The rows' delays, by line: the turns after a session's first.
		delays := map[int]float64{2: 100, 3: 250, 5: 0}
		ended := map[int]RequestEnd{}
		for _, e := range ends {
			require.Equal(t, cluster.OutcomeCompleted, e.Result.Outcome, e.Result.Error)
			ended[e.Line] = e
			assert.InDelta(t, e.ArrivedMs+e.Result.E2EMs, e.EndedMs, 1e-6, "line %d ends at arrival + E2E", e.Line)
		}
		for line, d := range delays {
			before := ended[line-1]
			assert.InDelta(t, before.EndedMs+d, ended[line].ArrivedMs, 1e-9, "%s line %d arrives its delay after line %d ended", path, line, line-1)
		}
		assert.Equal(t, 0.0, ended[1].ArrivedMs)
		assert.Equal(t, 5.0, ended[4].ArrivedMs)
		assert.Equal(t, 7.0, ended[6].ArrivedMs, "a request outside a session arrives at its timestamp")
		assert.Equal(t, 2, out.Summary.Sessions)
		assert.Zero(t, out.Summary.LateTurns)
	}
}

func TestReplay_TTFTEqualsRunVirtualOfTheSameArrivals(t *testing.T) {
	t.Parallel()
	// A Mooncake-shaped trace: shared prefixes, arrivals close enough to
	// queue and hold.
	var trace strings.Builder
	var arrivals []cluster.Arrival
	for i := range 300 {
		ids := []uint64{uint64(i % 5), uint64(100 + i%11), uint64(1000 + i)}
		in, outLen := 1200+i%300, 20+i%40
		trace.WriteString(jsonLine(float64(i)*4, in, outLen, ids))
		arrivals = append(arrivals, cluster.Arrival{AtMs: float64(i) * 4,
			Request: cluster.Request{Tokens: AppendTokens(nil, ids, in, DefaultBlockSize, uint64(i)), MaxTokens: outLen}})
	}
	want, err := cluster.RunVirtual(disagg(), arrivals, cluster.VirtualOptions{})
	require.NoError(t, err)
	tr, err := NewReader(strings.NewReader(trace.String()))
	require.NoError(t, err)
	got := make([]cluster.Result, len(arrivals))
	out, err := Run(disagg(), tr, Options{OnRequest: func(e RequestEnd) { got[e.Line-1] = e.Result }})
	require.NoError(t, err)
	for i := range got {
		assert.Equal(t, want.Results[i].TTFTMs, got[i].TTFTMs, "request %d", i)
	}
	assert.Equal(t, want.Results, got)
	assert.Equal(t, want.Stats, out.Run.Stats)
	assert.Positive(t, out.Summary.KV.Holds)
}

func jsonLine(ts float64, in, out int, ids []uint64) string {
	var b strings.Builder
	b.WriteString(`{"timestamp": ` + ftoa(ts) + `, "input_length": ` + itoa(in) + `, "output_length": ` + itoa(out) + `, "hash_ids": [`)
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(itoa(int(id)))
	}
	b.WriteString("]}\n")
	return b.String()
}

func TestReplay_SameInputsGiveByteIdenticalJSON(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"testdata/sessions.jsonl", "testdata/shared.jsonl", "testdata/plain.csv"} {
		var runs [2][]byte
		for i := range runs {
			out, _ := replayFile(t, disagg(), path, Options{RateScale: 3, SLO: SLO{TTFTMs: 40}})
			var b bytes.Buffer
			require.NoError(t, out.Summary.WriteJSON(&b))
			require.NoError(t, out.Summary.WriteTable(&b))
			runs[i] = b.Bytes()
		}
		assert.Equal(t, string(runs[0]), string(runs[1]), path)
	}
}

func TestReplay_Controls(t *testing.T) {
	t.Parallel()
	full, _ := replayFile(t, disagg(), "testdata/plain.csv", Options{})
	assert.Equal(t, uint64(3), full.Summary.Completed)
	_, ends := replayFile(t, disagg(), "testdata/plain.csv", Options{RateScale: 2})
	arrived := map[int]float64{}
	for _, e := range ends {
		arrived[e.Line] = e.ArrivedMs
	}
	assert.Equal(t, map[int]float64{2: 0, 3: 6, 4: 12}, arrived, "rate scale 2 halves the gaps")
	capped, _ := replayFile(t, disagg(), "testdata/plain.csv", Options{MaxRequests: 2})
	assert.Equal(t, uint64(2), capped.Summary.Requests)
	short, _ := replayFile(t, disagg(), "testdata/plain.csv", Options{DurationMs: 12})
	assert.Equal(t, uint64(1), short.Summary.Requests, "an arrival at the duration is not sent")
	sess, _ := replayFile(t, disagg(), "testdata/sessions.jsonl", Options{MaxRequests: 4})
	assert.Equal(t, uint64(4), sess.Summary.Requests, "turns count toward max requests")
}

func TestReplay_CSVSessions(t *testing.T) {
	t.Parallel()
	trace := "session_id,timestamp,input_length,output_length,delay,note\n" +
		"s1,0,300,10,,first\n" +
		"s1,,400,10,75,second\n" +
		",3,100,5,,alone\n"
	tr, err := NewReader(strings.NewReader(trace))
	require.NoError(t, err)
	ended := map[int]RequestEnd{}
	out, err := Run(disagg(), tr, Options{OnRequest: func(e RequestEnd) { ended[e.Line] = e }})
	require.NoError(t, err)
	require.Len(t, ended, 3)
	assert.InDelta(t, ended[2].EndedMs+75, ended[3].ArrivedMs, 1e-9, "the second turn waits its delay after the first ended")
	assert.Equal(t, 3.0, ended[4].ArrivedMs)
	assert.Equal(t, "s1", ended[3].Session)
	assert.Equal(t, 1, out.Summary.Sessions)
}

func TestRun_RefusesBadOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{RateScale: -1}, "rate scale"},
		{Options{MaxRequests: -1}, "max requests"},
		{Options{DurationMs: -5}, "duration"},
		{Options{BlockSize: -512}, "trace block size"},
	} {
		tr, err := NewReader(strings.NewReader("timestamp,input_length,output_length\n0,5,2\n"))
		require.NoError(t, err)
		_, err = Run(disagg(), tr, tc.opts)
		assert.ErrorContains(t, err, tc.want)
	}
}
