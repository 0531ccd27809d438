package xk6mocker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptRuns are the settings each scenario in scripts/ runs with here,
// one entry per run, on the virtual clock at its full default length; a
// script missing from the map runs once with its defaults, so a new script
// cannot go untested.
var scriptRuns = map[string][]map[string]string{
	"router-matrix.js": {
		{"ROUTER": "round-robin", "ENGINE": "vllm"},
		{"ROUTER": "kv", "ENGINE": "vllm"},
		{"ROUTER": "least-loaded", "ENGINE": "vllm"},
		{"ROUTER": "random", "ENGINE": "vllm"},
		{"ROUTER": "kv", "ENGINE": "sglang"},
		{"ROUTER": "kv", "ENGINE": "trtllm"},
	},
	"cascade.js": {
		nil,
		{"ENGINE": "trtllm"},
		{"OFFLOAD": "2048"},
		{"OFFLOAD": "256", "DISK": "2048"},
	},
}

// readmeExample is the README's "Writing a scenario" script, kept
// byte-identical to the README block by TestREADME_ExampleIsARealScript
// and run with its thresholds by TestScripts_PassTheirThresholds.
const readmeExample = "testdata/readme.js"

// buildMocker builds the mocker binary for tests that run it as users do.
func buildMocker(t *testing.T) (bin, root string) {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin = filepath.Join(t.TempDir(), "mocker")
	build := exec.Command("go", "build", "-o", bin, "./cmd/mocker")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the mocker binary: %s", out)
	return bin, root
}

// runMocker runs the mocker binary and returns its exit code and output.
func runMocker(t *testing.T, bin, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, out.String(), errOut.String()
}

// TestScripts_PassTheirThresholds runs every script in scripts/ (and the
// README's example) through the mocker binary on the virtual clock, as the
// README tells CI users to, at full length, and expects exit code 0: each
// one's thresholds hold (cascade.js's assert that holds and aborts happen
// and that nothing leaks after drain). Each runs twice — the second time
// with an NDJSON output and two goroutines burning CPU beside it — and
// must write the same --summary-export byte for byte: the verdict does
// not depend on the host or on the outputs.
func TestScripts_PassTheirThresholds(t *testing.T) {
	if skipUnderShort(testing.Short(), os.Getenv("CI")) {
		t.Skip("builds the mocker binary and runs every scenario script; -short skips it unless CI=true")
	}
	bin, root := buildMocker(t)
	scripts, err := filepath.Glob(filepath.Join(root, "scripts", "*.js"))
	require.NoError(t, err)
	require.NotEmpty(t, scripts, "no scripts in %s/scripts", root)
	sort.Strings(scripts)
	readme, err := filepath.Abs(readmeExample)
	require.NoError(t, err)
	for _, script := range append(scripts, readme) {
		base := filepath.Base(script)
		runs := scriptRuns[base]
		if runs == nil {
			runs = []map[string]string{nil}
		}
		for _, env := range runs {
			name := base
			switch {
			case env["ROUTER"] != "":
				name += "/" + env["ENGINE"] + "-" + env["ROUTER"]
			case env["ENGINE"] != "":
				name += "/" + env["ENGINE"]
			case env["DISK"] != "":
				name += "/disk"
			case env["OFFLOAD"] != "":
				name += "/offload"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				args := []string{"run", "-q", "--no-color", "--clock", "virtual"}
				keys := make([]string, 0, len(env))
				for k := range env {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					args = append(args, "-e", k+"="+env[k])
				}
				var exports [2]string
				for i := range exports {
					path := filepath.Join(dir, fmt.Sprintf("summary-%d.json", i))
					runArgs := append(slices.Clone(args), "--summary-export", path)
					if i == 1 {
						runArgs = append(runArgs, "-o", "json="+filepath.Join(dir, "samples.json"))
						stop := burnCPU(2)
						defer stop()
					}
					code, stdout, stderr := runMocker(t, bin, root, append(runArgs, script)...)
					require.Equalf(t, 0, code, "exit code\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
					assert.Contains(t, stdout, "█ KV HANDOFF")
					assert.NotContains(t, stdout, "✗ '", "a threshold was crossed")
					b, err := os.ReadFile(path)
					require.NoError(t, err)
					exports[i] = string(b)
				}
				assert.Equal(t, exports[0], exports[1], "the second run's summary differs")
			})
		}
	}
}

// burnCPU keeps n goroutines busy until stop is called.
func burnCPU(n int) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			x := 0
			for !done.Load() {
				x++
			}
			_ = x
		})
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

// TestScripts_QuickstartPacedAsOnVirtualTime: `mocker run` runs on the
// paced clock by default. A live run of the quickstart past saturation,
// with CPU burners and -o json beside it, reports what the same run on
// virtual time reports, byte for byte but for mocker_clock_lag (how far the
// host fell behind, and the warning when it fell far behind: measurements
// of the host, not of the model).
func TestScripts_QuickstartPacedAsOnVirtualTime(t *testing.T) {
	if skipUnderShort(testing.Short(), os.Getenv("CI")) {
		t.Skip("builds the mocker binary; -short skips it unless CI=true")
	}
	bin, root := buildMocker(t)
	dir := t.TempDir()
	args := []string{"run", "-q", "--no-color", "-e", "DURATION=6s"}
	export := func(name string, extra ...string) (map[string]any, string) {
		path := filepath.Join(dir, name+".json")
		runArgs := append(slices.Clone(args), extra...)
		code, stdout, stderr := runMocker(t, bin, root, append(runArgs, "--summary-export", path, "scripts/quickstart.js")...)
		require.Equalf(t, 0, code, "exit code\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		delete(m["metrics"].(map[string]any), MetricClockLag)
		def := m["mocker"].(map[string]any)["clusters"].(map[string]any)["default"].(map[string]any)
		delete(def, "clock_lag_peak_ms")
		delete(def, "lag_warning") // says when the host fell far behind: the host's, too

		return m, stderr
	}
	virtual, _ := export("virtual", "--clock", "virtual")
	stop := burnCPU(2)
	live, _ := export("paced", "-o", "json="+filepath.Join(dir, "samples.json"))
	stop()
	assert.Equal(t, virtual, live)
	aborts, ok := virtual["metrics"].(map[string]any)[MetricKVAborts].(map[string]any)
	require.True(t, ok, "the run aborted no hold: it must reach saturation to mean something")
	assert.Positive(t, aborts["count"])
}

// TestScripts_QuickstartOnTheWallClock: on `--clock wall` (every VU on its
// own goroutine) a short, unsaturated run of the quickstart passes its
// thresholds too.
func TestScripts_QuickstartOnTheWallClock(t *testing.T) {
	if skipUnderShort(testing.Short(), os.Getenv("CI")) {
		t.Skip("builds the mocker binary; -short skips it unless CI=true")
	}
	bin, root := buildMocker(t)
	code, stdout, stderr := runMocker(t, bin, root, "run", "-q", "--no-color", "--clock", "wall", "-e", "DURATION=3s", "-e", "VUS=6", "scripts/quickstart.js")
	require.Equalf(t, 0, code, "exit code\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "█ KV HANDOFF")
}

// skipUnderShort says whether a slow test skips: only under -short, and
// never in CI (ci is the CI variable), where every test must run. A CI value
// that is not a boolean counts as CI: it most likely comes from a CI system.
func skipUnderShort(short bool, ci string) bool {
	if !short {
		return false
	}
	ci = strings.TrimSpace(ci)
	if ci == "" {
		return true
	}
	on, err := strconv.ParseBool(ci)
	return err == nil && !on
}

func TestSkipUnderShort_NeverInCI(t *testing.T) {
	tests := []struct {
		short bool
		ci    string
		skip  bool
	}{
		{false, "", false},
		{false, "false", false},
		{true, "", true},
		{true, "false", true},
		{true, "0", true},
		{true, "true", false},
		{true, "1", false},
		{true, "TRUE", false},
		{true, "yes", false},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.skip, skipUnderShort(tc.short, tc.ci), "short=%v CI=%q", tc.short, tc.ci)
	}
}

// TestScripts_StartWithUsage keeps every script's opening comment honest:
// it says how to run the script and names each -e variable it reads.
func TestScripts_StartWithUsage(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join("..", "scripts", "*.js"))
	require.NoError(t, err)
	require.NotEmpty(t, scripts)
	for _, script := range scripts {
		src, err := os.ReadFile(script)
		require.NoError(t, err)
		text := string(src)
		require.Truef(t, strings.HasPrefix(text, "// "+filepath.Base(script)), "%s starts with a comment naming it", script)
		header, _, _ := strings.Cut(text, "\nimport ")
		assert.Containsf(t, header, "bin/mocker run", "%s says how to run it", script)
		for _, v := range envVars(text) {
			assert.Containsf(t, header, "-e "+v+"=", "%s documents -e %s in its header", script, v)
		}
	}
}

// TestScripts_TakeSpeedup: every script lets its speedup_ratio be set
// with -e SPEEDUP, since its wall-time pacing means something different at
// another speedup.
func TestScripts_TakeSpeedup(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join("..", "scripts", "*.js"))
	require.NoError(t, err)
	require.NotEmpty(t, scripts)
	for _, script := range scripts {
		src, err := os.ReadFile(script)
		require.NoError(t, err)
		assert.Containsf(t, envVars(string(src)), "SPEEDUP", "%s reads -e SPEEDUP", script)
		assert.Truef(t, speedupArg.Match(src), "%s passes SPEEDUP to speedup_ratio", script)
	}
}

var speedupArg = regexp.MustCompile(`speedup_ratio: (SPEEDUP|parseFloat\(__ENV\.SPEEDUP)`)

// TestREADME_ExampleIsARealScript keeps the README's "Writing a scenario"
// example byte-identical to testdata/readme.js, which the scripts test runs
// with its thresholds: what a reader copies passes.
func TestREADME_ExampleIsARealScript(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	block, ok := sectionCodeBlock(string(readme), "## Writing a scenario", "```js\n")
	require.True(t, ok, "README.md has a js block under \"## Writing a scenario\"")
	want, err := os.ReadFile(readmeExample)
	require.NoError(t, err)
	assert.Equal(t, string(want), block, "the README example and %s differ", readmeExample)
}

// sectionCodeBlock returns the body of the first fenced block opening with
// fence after the heading.
func sectionCodeBlock(doc, heading, fence string) (string, bool) {
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return "", false
	}
	if next := strings.Index(rest, "\n## "); next >= 0 {
		rest = rest[:next]
	}
	_, rest, ok = strings.Cut(rest, fence)
	if !ok {
		return "", false
	}
	body, _, ok := strings.Cut(rest, "```\n")
	return body, ok
}

// envVars lists the __ENV.NAME references of a script.
func envVars(src string) []string {
	seen := map[string]bool{}
	var out []string
	for rest := src; ; {
		i := strings.Index(rest, "__ENV.")
		if i < 0 {
			break
		}
		rest = rest[i+len("__ENV."):]
		j := 0
		for j < len(rest) && (rest[j] == '_' || rest[j] >= 'A' && rest[j] <= 'Z' || rest[j] >= '0' && rest[j] <= '9') {
			j++
		}
		if name := rest[:j]; name != "" && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
