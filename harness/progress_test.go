package harness

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/harness/options"
)

// screen replays what a terminal would show for out: printable text,
// "\r", "\n" and the escape sequences the progress display uses (cursor up
// ESC[nA, erase line ESC[2K, erase to the end of the screen ESC[J). Any
// other escape sequence fails the test, so the emulation cannot silently
// drift from what the display emits.
func screen(t *testing.T, out string) []string {
	t.Helper()
	var rows [][]rune
	row, col := 0, 0
	grow := func() {
		for len(rows) <= row {
			rows = append(rows, nil)
		}
	}
	grow()
	for i := 0; i < len(out); {
		if out[i] == 0x1b {
			j := i + 2
			for j < len(out) && out[j] >= '0' && out[j] <= '9' {
				j++
			}
			require.Less(t, j, len(out), "truncated escape sequence")
			require.Equal(t, byte('['), out[i+1])
			n := 1
			if j > i+2 {
				n, _ = strconv.Atoi(out[i+2 : j])
			}
			switch out[j] {
			case 'A':
				row = max(0, row-n)
			case 'K':
				rows[row] = nil
			case 'J':
				rows[row] = rows[row][:min(col, len(rows[row]))]
				rows = rows[:row+1]
			default:
				t.Fatalf("unexpected escape sequence %q", out[i:j+1])
			}
			i = j + 1
			continue
		}
		r, size := utf8.DecodeRuneInString(out[i:])
		i += size
		switch r {
		case '\r':
			col = 0
		case '\n':
			row, col = row+1, 0
			grow()
		default:
			for len(rows[row]) <= col {
				rows[row] = append(rows[row], ' ')
			}
			rows[row][col] = r
			col++
		}
	}
	lines := make([]string, len(rows))
	for i, r := range rows {
		lines[i] = string(r)
	}
	return lines
}

func TestStderrWriter_LogLinesScrollAboveTheProgressBlock(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	w := newStderrWriter(&out, true)
	w.showBlock([]string{"running 1", "scenario a 10%"})
	_, err := w.Write([]byte("first log line\n"))
	require.NoError(t, err)
	w.showBlock([]string{"running 2", "scenario a 50%"})
	_, err = w.Write([]byte("second log line without newline"))
	require.NoError(t, err)
	w.showBlock([]string{"running 3", "scenario a 100%"})
	w.release()
	_, err = w.Write([]byte("after the display\n"))
	require.NoError(t, err)

	got := screen(t, out.String())
	assert.Equal(t, []string{
		"first log line",
		"second log line without newline",
		"running 3",
		"scenario a 100%",
		"after the display",
		"",
	}, got)
}

func TestRun_ConsoleOutputSurvivesTheTerminalProgressDisplay(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	res := runScript(t, `
import { sleep } from 'k6';
export const options = { vus: 1, duration: '300ms' };
export default function () { if (__ITER == 3) console.log('IMPORTANT LOG LINE'); sleep(0.02); }
`, func(c *Config) {
		c.Quiet, c.StderrTTY, c.ProgressInterval, c.Stderr = false, true, 5*time.Millisecond, &stderr
	})
	require.NoError(t, res.err)
	lines := screen(t, stderr.String())
	var logAt, headerAt = -1, -1
	for i, l := range lines {
		if strings.Contains(l, "IMPORTANT LOG LINE") {
			logAt = i
		}
		if strings.HasPrefix(l, "running (") {
			headerAt = i
		}
	}
	require.GreaterOrEqual(t, logAt, 0, "the log line was drawn over:\n%s", strings.Join(lines, "\n"))
	assert.Greater(t, headerAt, logAt, "the final progress block sits below the log line")
	assert.Equal(t, 1, strings.Count(strings.Join(lines, "\n"), "running ("), "one progress block on screen")
}

// finishedRun is a testRun with one scenario that has already finished.
func finishedRun(width int) *testRun {
	t := &testRun{cfg: Config{StderrTTY: width > 0, TermWidth: width}}
	sc := &scenarioRun{t: t, cfg: &options.Scenario{Name: "a-scenario-with-a-rather-long-name", Executor: options.ExecPerVUIterations, VUs: 1, Iterations: 1, MaxDuration: time.Minute}}
	sc.startedAt = time.Now().Add(-2 * time.Second)
	sc.started.Store(true)
	sc.ranFor.Store(int64(1500 * time.Millisecond))
	sc.finished.Store(true)
	t.scenarios = []*scenarioRun{sc}
	return t
}

func TestProgress_FinishedScenarioStopsItsClock(t *testing.T) {
	t.Parallel()
	tr := finishedRun(0)
	assert.Equal(t, 1500*time.Millisecond, tr.scenarios[0].elapsed())
}

func TestProgress_LinesAreCutToTheTerminalWidth(t *testing.T) {
	t.Parallel()
	tr := finishedRun(30)
	var out bytes.Buffer
	tr.stderr = newStderrWriter(&out, true)
	for _, l := range newProgress(tr).lines() {
		assert.LessOrEqual(t, utf8.RuneCountInString(l), 29, l)
	}
}

func TestProgress_WithoutATerminalTheFinalBlockPrintsOnce(t *testing.T) {
	t.Parallel()
	tr := finishedRun(0)
	var out syncBuffer
	tr.stderr = newStderrWriter(&out, false)
	tr.cfg.ProgressInterval = time.Millisecond
	p := newProgress(tr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.run(ctx); close(done) }()
	time.Sleep(30 * time.Millisecond) // many ticks, all with the work done
	cancel()
	<-done
	assert.Equal(t, 1, strings.Count(out.String(), "running ("), out.String())
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestClock_KeepsItsDigitsAsTimeGoesBy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0.0s"},
		{-time.Second, "0.0s"},
		{21 * time.Millisecond, "0.0s"},
		{1250 * time.Millisecond, "1.3s"},
		{59960 * time.Millisecond, "1m00.0s"},
		{65 * time.Second, "1m05.0s"},
		{10 * time.Minute, "10m00.0s"},
		{time.Hour + 2*time.Minute + 3400*time.Millisecond, "1h02m03.4s"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, clock(tc.d), "%v", tc.d)
	}
}

func TestAlignColumns_PadsToTheWidestCellOfEachColumn(t *testing.T) {
	t.Parallel()
	got := alignColumns([][]string{
		{"a", "[ 10%]", "running", "1 iters"},
		{"longer", "[100%]", "done", "123 iters", "4 dropped"},
	})
	assert.Equal(t, []string{
		"a       [ 10%]  running  1 iters",
		"longer  [100%]  done     123 iters  4 dropped",
	}, got)
}

func TestProgress_IterationScenariosCountIterationsNotTime(t *testing.T) {
	t.Parallel()
	tr := finishedRun(0)
	tr.scenarios[0].completed.Store(1)
	lines := newProgress(tr).lines()
	require.Len(t, lines, 2)
	assert.Contains(t, lines[1], "1/1 iters")
	assert.Contains(t, lines[1], "[100%]")
	assert.Contains(t, lines[1], " 1.5s ", "the time it took")
	assert.NotContains(t, lines[1], "1m", "maxDuration is a cap, not the plan")
}

// finalBlock runs src with the progress display drawn only once, at the
// end, and returns that block's lines.
func finalBlock(t *testing.T, src string) []string {
	t.Helper()
	var stderr syncBuffer
	runScript(t, src, func(c *Config) {
		c.Quiet, c.Stderr, c.ProgressInterval = false, &stderr, time.Hour
	})
	out := stderr.String()
	i := strings.LastIndex(out, "running (")
	require.GreaterOrEqual(t, i, 0, "no progress block in:\n%s", out)
	return strings.Split(strings.TrimSpace(out[i:]), "\n")
}

func TestProgress_FinalBlockShowsScenariosStoppedByAnAbort(t *testing.T) {
	t.Parallel()
	block := finalBlock(t, `
import exec from 'k6/execution';
import { sleep } from 'k6';
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 2, duration: '1m' } } };
export default function () {
  if (exec.vu.idInTest === 1 && exec.vu.iterationInScenario === 2) exec.test.abort('enough');
  sleep(0.01);
}
`)
	require.Len(t, block, 2, strings.Join(block, "\n"))
	assert.Contains(t, block[0], ", 0/2 VUs,", "the picture is taken after the VUs stopped")
	assert.Contains(t, block[1], "stopped")
	assert.NotContains(t, block[1], "[100%]", "an aborted scenario did not do all its work")
	assert.Contains(t, block[1], "0/2 VUs")
}

func TestProgress_RampingArrivalRateLastsItsStages(t *testing.T) {
	t.Parallel()
	// one start a minute ramping down to none: the plan has one start at
	// most, yet the scenario lasts its 300 ms as in k6
	block := finalBlock(t, `
export const options = { scenarios: { r: { executor: 'ramping-arrival-rate', startRate: 1, timeUnit: '1m',
  preAllocatedVUs: 1, stages: [{ duration: '300ms', target: 0 }] } } };
export default function () {}
`)
	require.Len(t, block, 2, strings.Join(block, "\n"))
	assert.Contains(t, block[1], "[100%]  done")
	assert.Contains(t, block[1], "0.3s/0.3s")
}

// TestProgress_PacedClockShowsItsLag: a paced run's header says how far the
// host has fallen behind the wall clock, once that is worth saying.
func TestProgress_PacedClockShowsItsLag(t *testing.T) {
	t.Parallel()
	tr := finishedRun(0)
	tr.vclock = NewPacedClock(time.Time{})
	tr.clock = tr.vclock
	tr.start = tr.vclock.Now()
	defer tr.vclock.Done()
	assert.NotContains(t, newProgress(tr).lines()[0], "behind", "no lag yet")
	time.Sleep(150 * time.Millisecond) // the host holds the turn: the clock falls behind
	require.True(t, tr.vclock.Sleep(context.Background(), time.Millisecond))
	header := newProgress(tr).lines()[0]
	assert.Regexp(t, `^running \([0-9.ms]+, [0-9.ms]+ behind the wall clock\)`, header)
}

// TestReportPace_WarnsPastATenthOfTheRun: the end of a paced run warns when
// the host fell behind the clock by over a tenth of the run.
func TestReportPace_WarnsPastATenthOfTheRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		hold, run time.Duration
		warns     bool
	}{
		{0, time.Hour, false},
		{60 * time.Millisecond, 100 * time.Millisecond, true}, // ≥ 59 ms of 100 ms
	} {
		tr := finishedRun(0)
		var out syncBuffer
		tr.stderr = newStderrWriter(&out, false)
		tr.logger = slog.New(newLogHandler(tr.stderr, slog.LevelInfo, func() time.Duration { return 0 }))
		tr.vclock = NewPacedClock(time.Time{})
		time.Sleep(tc.hold) // the host holds the turn
		require.True(t, tr.vclock.Sleep(context.Background(), time.Millisecond))
		tr.reportPace(tc.run)
		tr.vclock.Done()
		if !tc.warns {
			assert.Empty(t, out.String())
			continue
		}
		assert.Contains(t, out.String(), "the host fell behind the paced clock by up to")
		assert.Contains(t, out.String(), "its results are unaffected")
	}
}
