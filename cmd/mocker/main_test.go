package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvstrand/mocker/harness"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeBinary()
		os.Exit(code)
	}))
}

// runArgs runs `mocker run` with args in process, without terminals.
func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = runWith(context.Background(), args, &out, &errOut, false, false, 0)
	return code, out.String(), errOut.String()
}

func TestRunUsage_NamesEveryFlag(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help", "-help"} {
		t.Run(arg, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runArgs(arg)
			assert.Equal(t, 0, code)
			assert.Empty(t, stderr, "help is asked for, so it goes to stdout")
			fs, _ := newRunFlags()
			n := 0
			fs.VisitAll(func(f *flag.Flag) {
				n++
				name := "--" + f.Name
				if len(f.Name) == 1 {
					name = "-" + f.Name
				}
				// the name followed by a space, comma or "=" (not a prefix of a longer flag)
				assert.Regexp(t, regexp.MustCompile(regexp.QuoteMeta(name)+`[ ,=]`), stdout, "the help does not explain %s", name)
			})
			assert.Greater(t, n, 10, "the flag set looks empty")
		})
	}
}

func TestRunUsage_ListsEveryExitCode(t *testing.T) {
	t.Parallel()
	_, stdout, _ := runArgs("-h")
	codes := []int{harness.ExitOK, exitUsage, harness.ExitThresholdsFailed, harness.ExitSetupTimeout,
		harness.ExitTeardownTimeout, harness.ExitInvalidConfig, harness.ExitExternalAbort,
		harness.ExitScriptException, harness.ExitScriptAborted, harness.ExitTestFailed}
	for _, c := range codes {
		assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^  %d +\S`, c)), stdout, "exit code %d has no line of its own", c)
	}
}

func TestRun_UsageErrorsAreShortAndOnStderr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		says string
	}{
		{"no arguments", nil, "missing the script path"},
		{"only flags", []string{"-q", "-u", "2"}, "missing the script path"},
		{"unknown flag", []string{"--no-such-flag", "x.js"}, "flag provided but not defined: -no-such-flag"},
		{"flag without its value", []string{"x.js", "-u"}, "flag needs an argument: -u"},
		{"two scripts", []string{"a.js", "b.js"}, `one script expected, got 2: ["a.js" "b.js"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runArgs(tc.args...)
			assert.Equal(t, exitUsage, code)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, "mocker run: "+tc.says)
			assert.Contains(t, stderr, "mocker run -h", "points at the full help")
			assert.NotContains(t, stderr, "Exit codes:", "a usage error is short, not the whole help")
		})
	}
}

func TestDispatch_TopLevelUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		code     int
		toStdout bool
	}{
		{"no command", nil, exitUsage, false},
		{"help", []string{"help"}, 0, true},
		{"-h", []string{"-h"}, 0, true},
		{"--help", []string{"--help"}, 0, true},
		{"unknown command", []string{"walk"}, exitUsage, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := dispatch(tc.args, &stdout, &stderr)
			assert.Equal(t, tc.code, code)
			out, other := stderr.String(), stdout.String()
			if tc.toStdout {
				out, other = other, out
			}
			assert.Empty(t, other)
			assert.Regexp(t, `(?m)^  mocker run \[flags\] script\.js`, out)
			assert.Regexp(t, `(?m)^  mocker version`, out)
			assert.Regexp(t, `(?m)^  mocker args \[KEY\.\.\.\]`, out)
			assert.Regexp(t, `(?m)^  mocker metrics \[NAME\.\.\.\]`, out)
		})
	}
}

func TestDispatch_HelpRunPrintsTheRunUsage(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, dispatch([]string{"help", "run"}, &stdout, &stderr))
	assert.Equal(t, runUsage, stdout.String())
	assert.Empty(t, stderr.String())
}

func TestDispatch_VersionGoesToStdout(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, dispatch([]string{"version"}, &stdout, &stderr))
	assert.Regexp(t, `^mocker \S+\n(  \S.*\n)*  go        go1\.\S+ \S+/\S+\n$`, stdout.String())
	assert.Empty(t, stderr.String())
}

// TestRun_Clocks: by default a script that uses k6/x/mocker is paced and
// any other runs on the wall clock, as in k6; --clock (or MOCKER_CLOCK)
// picks another clock, and a wrong choice says what the choices are.
func TestRun_Clocks(t *testing.T) {
	script := filepath.Join(t.TempDir(), "s.js")
	require.NoError(t, os.WriteFile(script, []byte(`
import { sleep } from 'k6';
export const options = { iterations: 2 };
export default function () { console.log('at ' + Date.now()); sleep(0.05); }
`), 0o600))
	withMocker := filepath.Join(t.TempDir(), "m.js")
	require.NoError(t, os.WriteFile(withMocker, []byte(`
import { sleep } from 'k6';
import mocker from 'k6/x/mocker';
export const options = { iterations: 1 };
export default function () { sleep(0.05); }
`), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		env  string
		code int
		says string
	}{
		{"default is wall for a plain script", nil, "", 0, "(chosen: the script imports no module that keeps modeled time"},
		{"default is paced with mocker", []string{withMocker}, "", 0, "(chosen: the script imports k6/x/mocker, which keeps modeled time"},
		{"virtual", []string{"--clock", "virtual"}, "", 0, "clock: virtual, from 2026-01-01T00:00:00Z"},
		{"env", nil, "virtual", 0, "clock: virtual, from "},
		{"flag over env", []string{"--clock", "paced"}, "virtual", 0, "clock: paced, from "},
		{"paced epoch", []string{"--virtual-epoch", "2030-05-06T07:08:09Z"}, "", 0, "clock: paced, from 2030-05-06T07:08:09Z"},
		{"wall", []string{"--clock", "wall"}, "", 0, "output: -"},
		{"auto", []string{"--clock", "auto"}, "", 0, "clock: wall"},
		{"unknown", []string{"--clock", "fast"}, "", 104, "--clock: want auto, paced, virtual or wall, got \"fast\""},
		{"unknown env", nil, "fast", 104, "MOCKER_CLOCK: want auto, paced, virtual or wall, got \"fast\""},
		{"epoch on the wall clock", []string{"--clock", "wall", "--virtual-epoch", "2030-05-06T07:08:09Z"}, "", 104, "--virtual-epoch: only means something with --clock paced or --clock virtual"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("MOCKER_CLOCK", tc.env)
			args := tc.args
			if !slices.Contains(args, withMocker) {
				args = append(args, script)
			}
			code, _, stderr := runArgs(append([]string{"--no-color"}, args...)...)
			assert.Equal(t, tc.code, code, stderr)
			assert.Contains(t, stderr, tc.says)
			if tc.name == "wall" {
				assert.NotContains(t, stderr, "clock:")
			}
		})
	}
}
