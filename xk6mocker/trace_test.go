package xk6mocker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
	"github.com/kvstrand/mocker/replay"
)

// playedRequest is what trace_play.js reports of one request.
type playedRequest struct {
	Outcome   string  `json:"outcome"`
	TTFTMs    float64 `json:"ttft_ms"`
	E2EMs     float64 `json:"e2e_ms"`
	ArrivedMs float64 `json:"arrived_ms"`
	EndedMs   float64 `json:"ended_ms"`
	Session   string  `json:"session"`
}

// playConfig is a small disaggregated cluster that the test traces load
// enough for queues and KV holds.
const playConfig = `{"engine": "vllm", "router": "kv", "seed": 7,
  "prefill": {"workers": 2, "args": {"max_num_seqs": 4}},
  "decode": {"workers": 2, "args": {"max_num_seqs": 6, "num_gpu_blocks": 1200}},
  "args": {"speedup_ratio": %s, "kv_transfer_abort_timeout_ms": 400}}`

// busyTrace writes a Mooncake-shaped trace of n requests arriving every
// few integral ms, sharing prefixes by hash id.
func busyTrace(t *testing.T, n int) string {
	t.Helper()
	var b bytes.Buffer
	for i := range n {
		ids := []int{i % 5, 100 + i%3, 1000 + i}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%d, %d, %d]}`+"\n",
			i*9, 1200+(i*137)%900, 10+(i*31)%50, ids[0], ids[1], ids[2])
	}
	path := filepath.Join(t.TempDir(), "busy.jsonl")
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
	return path
}

// replayed is replay.Run's view of the same trace and config: each
// request by line.
func replayed(t *testing.T, config, tracePath string, opts replay.Options) (map[int]replay.RequestEnd, replay.Summary) {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader([]byte(config)))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&m))
	cfg, err := cluster.ConfigFromMap(m)
	require.NoError(t, err)
	f, err := os.Open(tracePath)
	require.NoError(t, err)
	defer f.Close()
	tr, err := replay.NewReader(f)
	require.NoError(t, err)
	out := map[int]replay.RequestEnd{}
	opts.OnRequest = func(r replay.RequestEnd) { out[r.Line] = r }
	res, err := replay.Run(cfg, tr, opts)
	require.NoError(t, err)
	return out, res.Summary
}

// played runs trace_play.js on the virtual clock.
func played(t *testing.T, config, tracePath string, env map[string]string) (map[string]playedRequest, map[string]any, string) {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "cluster.json")
	require.NoError(t, os.WriteFile(cfgPath, []byte(config), 0o644))
	all := map[string]string{"CONFIG": cfgPath, "TRACE": tracePath}
	for k, v := range env {
		all[k] = v
	}
	res := runScriptWith(t, "trace_play.js", all, func(c *harness.Config) { c.Clock = harness.ClockVirtual })
	require.Equal(t, 0, res.code, "stderr: %s\n%s", res.stderr, res.stdout)
	var out struct {
		Setup struct {
			Sent     int                      `json:"sent"`
			Requests int                      `json:"requests"`
			ByLine   map[string]playedRequest `json:"byLine"`
		} `json:"setup"`
		Requests map[string]any `json:"requests"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), "stdout: %s", res.stdout)
	require.Len(t, out.Setup.ByLine, out.Setup.Sent, "one result per request sent")
	require.Equal(t, out.Setup.Sent, out.Setup.Requests, "trace.requests counts what play sends")
	return out.Setup.ByLine, out.Requests, res.stdout
}

// TestTracePlay_SameTTFTsAsReplay: a trace played from a script on the
// virtual clock gives each request the arrival time and TTFT that
// `mocker replay` (replay.Run) gives it, for a trace of integral-ms
// timestamps whose arrivals the clock reaches exactly, at speedups 1 and
// 10 and with a rate scale; and the same script run twice prints the same
// bytes.
func TestTracePlay_SameTTFTsAsReplay(t *testing.T) {
	trace := busyTrace(t, 150)
	for _, tc := range []struct {
		speedup string
		rate    float64
	}{{"1", 1}, {"10", 1}, {"1", 2}, {"10", 3}} {
		t.Run(fmt.Sprintf("speedup %s rate %g", tc.speedup, tc.rate), func(t *testing.T) {
			config := fmt.Sprintf(playConfig, tc.speedup)
			want, sum := replayed(t, config, trace, replay.Options{RateScale: tc.rate})
			require.Positive(t, sum.KV.Holds, "the trace must reach handoffs to mean something")
			env := map[string]string{"RATE_SCALE": strconv.FormatFloat(tc.rate, 'g', -1, 64)}
			got, _, stdout := played(t, config, trace, env)
			require.Len(t, got, len(want))
			require.EqualValues(t, sum.Requests, len(got))
			for line, w := range want {
				g, ok := got[strconv.Itoa(line)]
				require.Truef(t, ok, "line %d was not played", line)
				assert.Equalf(t, w.Result.Outcome, g.Outcome, "line %d outcome", line)
				assert.Equalf(t, w.ArrivedMs, g.ArrivedMs, "line %d arrival", line)
				assert.Equalf(t, w.Result.TTFTMs, g.TTFTMs, "line %d TTFT", line)
				assert.Equalf(t, w.Result.E2EMs, g.E2EMs, "line %d E2E", line)
			}
			_, _, again := played(t, config, trace, env)
			assert.Equal(t, stdout, again, "a second run prints other bytes")
		})
	}
}

// TestTracePlay_Sessions: a session trace played from a script sends each
// later turn its delay after the turn before ended, as replay.Run does.
// The first turns arrive at the same instants and get the same TTFTs
// exactly. What differs is stated in docs/replay.md: a script learns that
// a turn ended at the clock's instant, a whole nanosecond of script time
// (rounded up), so each later turn of a session arrives up to
// speedup_ratio × 1e-6 ms later than replay.Run sends it, per turn
// before it in the session.
func TestTracePlay_Sessions(t *testing.T) {
	trace, err := filepath.Abs(filepath.Join("..", "replay", "testdata", "sessions.jsonl.gz"))
	require.NoError(t, err)
	for _, speedup := range []float64{1, 10} {
		t.Run(fmt.Sprint("speedup ", speedup), func(t *testing.T) {
			config := fmt.Sprintf(playConfig, strconv.FormatFloat(speedup, 'g', -1, 64))
			want, sum := replayed(t, config, trace, replay.Options{})
			require.Positive(t, sum.Sessions)
			got, requests, _ := played(t, config, trace, nil)
			require.Len(t, got, len(want))
			turn := map[string]int{} // turns seen per session, in line order
			lines := make([]int, 0, len(want))
			for line := range want {
				lines = append(lines, line)
			}
			sort.Ints(lines)
			later := 0
			for _, line := range lines {
				w := want[line]
				g, ok := got[strconv.Itoa(line)]
				require.Truef(t, ok, "line %d was not played", line)
				assert.Equalf(t, w.Session, g.Session, "line %d session", line)
				assert.Equalf(t, w.Result.Outcome, g.Outcome, "line %d outcome", line)
				n := turn[w.Session]
				turn[w.Session]++
				if n == 0 {
					assert.Equalf(t, w.ArrivedMs, g.ArrivedMs, "line %d, a first turn: arrival", line)
					assert.Equalf(t, w.Result.TTFTMs, g.TTFTMs, "line %d, a first turn: TTFT", line)
					continue
				}
				later++
				tol := float64(n) * speedup * 1e-6
				assert.GreaterOrEqualf(t, g.ArrivedMs, w.ArrivedMs, "line %d: never earlier", line)
				assert.InDeltaf(t, w.ArrivedMs, g.ArrivedMs, tol, "line %d, turn %d: arrival", line, n+1)
				assert.InDeltaf(t, w.Result.TTFTMs, g.TTFTMs, tol, "line %d, turn %d: TTFT", line, n+1)
			}
			require.Positive(t, later, "the trace has later turns")
			assert.EqualValues(t, len(want), requests["values"].(map[string]any)["count"], "mocker_requests counts every turn")
		})
	}
}

// TestTracePlay_ExampleScript runs scripts/replay.js as the docs show it:
// its thresholds hold at its defaults, and a replay cut short by
// MAX_DURATION fails the mocker_requests threshold (exit code 99) though
// every request it recorded completed.
func TestTracePlay_ExampleScript(t *testing.T) {
	script := filepath.Join("..", "..", "scripts", "replay.js") // runScriptWith joins testdata/
	for _, tc := range []struct {
		env     map[string]string
		code    int
		crossed string
	}{
		{nil, harness.ExitOK, ""},
		{map[string]string{"MAX_DURATION": "2s"}, harness.ExitThresholdsFailed, "✗ 'count==160'"},
	} {
		t.Run(fmt.Sprint(tc.env), func(t *testing.T) {
			res := runScriptWith(t, script, tc.env, func(c *harness.Config) {
				c.Clock = harness.ClockVirtual
				c.Quiet = false
			})
			require.Equal(t, tc.code, res.code, "stderr: %s\n%s", res.stderr, res.stdout)
			if tc.crossed == "" {
				assert.NotContains(t, res.stdout, "✗ '", "a threshold was crossed")
				return
			}
			assert.Contains(t, res.stdout, tc.crossed)
			assert.Contains(t, res.stdout, "✓ 'count==0'", "the requests recorded did not end in error")
		})
	}
}

// TestTrace_MistakesThrowNamingTheFix: each mistake with mocker.trace or
// trace.play fails the script with an error that says what to fix: the
// trace's line and field for a bad row, the option for a bad option.
func TestTrace_MistakesThrowNamingTheFix(t *testing.T) {
	for _, tc := range []struct {
		mistake, want string
		code          int
	}{
		{"bad_row", "mocker.trace: line 2: input_length: want a number of tokens in [1, ", harness.ExitScriptException},
		{"backwards", "mocker.trace: line 3: timestamp: 5 is before line 2's 10: requests must be in time order", harness.ExitScriptException},
		{"empty", "mocker.trace: " + replay.ErrEmpty.Error(), harness.ExitScriptException},
		{"not_data", "mocker.trace: want the trace's contents, open(path) or open(path, 'b') for gzip, got 42", harness.ExitScriptException},
		{"unknown_option", "mocker.trace: blocksize: unknown key; valid keys: " + strings.Join(traceKeys, ", "), harness.ExitScriptException},
		{"bad_rate", "mocker.trace: rate_scale", harness.ExitScriptException},
		{"outside_init", "mocker.trace: call it in the init context", harness.ExitOK},
		{"not_a_cluster", "trace.play: want a cluster from mocker.cluster(), got [object Object]", harness.ExitOK},
		{"bad_callback", "trace.play: onResult: want a function", harness.ExitOK},
	} {
		t.Run(tc.mistake, func(t *testing.T) {
			res := runScriptWith(t, "trace_errors.js", map[string]string{"MISTAKE": tc.mistake}, func(c *harness.Config) { c.Clock = harness.ClockVirtual })
			require.Equal(t, tc.code, res.code, "stderr: %s", res.stderr)
			if tc.code == harness.ExitOK {
				// An exception in an iteration fails the iteration, not the run.
				assert.Contains(t, res.stderr, tc.want)
				return
			}
			require.Error(t, res.err)
			assert.Contains(t, res.err.Error(), tc.want)
		})
	}
}

// TestTrace_PlayRefusesTheWallClock: on --clock wall the cluster keeps its
// own time, where arrivals cannot keep the trace's; play says which clock
// to use instead.
func TestTrace_PlayRefusesTheWallClock(t *testing.T) {
	res := runScriptWith(t, "trace_errors.js", nil, func(c *harness.Config) { c.Clock = harness.ClockWall })
	require.Equal(t, harness.ExitOK, res.code, "stderr: %s", res.stderr)
	assert.Contains(t, res.stderr, "trace.play: the cluster runs on the wall clock")
	assert.Contains(t, res.stderr, "--clock virtual")
}
