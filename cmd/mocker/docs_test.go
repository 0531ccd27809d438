package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/xk6mocker"
)

func dispatchOut(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = dispatch(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDocs_AreGeneratedFromTheSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, command string }{
		{"args.md", "args"},
		{"metrics.md", "metrics"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := dispatchOut(tc.command, "--markdown")
			require.Equal(t, 0, code, stderr)
			onDisk, err := os.ReadFile(filepath.Join("..", "..", "docs", tc.file))
			require.NoError(t, err)
			assert.Equalf(t, stdout, string(onDisk), "docs/%s is stale: run go generate ./cmd/mocker", tc.file)
		})
	}
}

func TestArgs_ListsEveryEngineArg(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := dispatchOut("args")
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	require.NotEmpty(t, engine.ArgDocs)
	for _, d := range engine.ArgDocs {
		assert.Regexpf(t, `(?m)^  `+regexp.QuoteMeta(d.Key)+`( \(alias .*\)|\n      \(alias .*\))?\n      type `+regexp.QuoteMeta(d.Type)+
			`; default `+regexp.QuoteMeta(d.Default)+`; Dynamo: `+regexp.QuoteMeta(d.Dynamo)+`\n`, stdout, "%s: key, type, default and Dynamo", d.Key)
		assert.Containsf(t, strings.Join(strings.Fields(stdout), " "), d.Meaning, "%s: meaning", d.Key)
	}
	for _, s := range argSections {
		assert.Contains(t, stdout, "\n"+strings.ToUpper(s.title)+"\n")
	}
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if !strings.HasPrefix(line, "      type ") {
			assert.LessOrEqualf(t, len([]rune(line)), 78, "prose is wrapped: %q", line)
		}
	}
}

func TestMetrics_ListsEveryMetric(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := dispatchOut("metrics")
	require.Equal(t, 0, code, stderr)
	require.NotEmpty(t, xk6mocker.MetricDocs)
	flat := strings.Join(strings.Fields(stdout), " ")
	for _, d := range xk6mocker.MetricDocs {
		assert.Regexpf(t, `(?m)^  `+regexp.QuoteMeta(d.Name)+` +`+regexp.QuoteMeta(metricType(d))+` +`+regexp.QuoteMeta(metricTags(d))+`\n`, stdout, "%s: name, type and tags", d.Name)
		assert.Containsf(t, flat, d.Meaning, "%s: meaning", d.Name)
	}
	for _, tag := range xk6mocker.CommonTags {
		assert.Contains(t, stdout, tag)
	}
}

func TestMetricType_NamesTheValueType(t *testing.T) {
	t.Parallel()
	got := map[string]string{}
	for _, d := range xk6mocker.MetricDocs {
		got[d.Name] = metricType(d)
	}
	assert.Equal(t, "Trend (time)", got[xk6mocker.MetricTTFT])
	assert.Equal(t, "Counter", got[xk6mocker.MetricKVAborts])
	assert.Equal(t, "Gauge", got[xk6mocker.MetricKVHeldBlocks])
	assert.Equal(t, "Rate", got[xk6mocker.MetricRequestFailed])
}

func TestDocsCmd_SelectionsFlagsAndMistakes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		code       int
		stdoutHas  []string
		stdoutNot  []string
		stderrHas  string
		stdoutNone bool
	}{
		{name: "one arg", args: []string{"args", "max_num_seqs"}, stdoutHas: []string{"  max_num_seqs\n      type integer ≥ 1, null = unbounded; default 256"},
			stdoutNot: []string{"num_gpu_blocks", "MODELED", "Engine arguments"}},
		{name: "a nested arg", args: []string{"args", "sglang.optimistic_prefill"}, stdoutHas: []string{"sglang.optimistic_prefill", "Dynamo: no (mocker's)"}},
		{name: "two metrics", args: []string{"metrics", "mocker_kv_aborts", "mocker_ttft"},
			stdoutHas: []string{"mocker_kv_aborts", "mocker_ttft"}, stdoutNot: []string{"mocker_e2e"}},
		{name: "one arg in Markdown", args: []string{"args", "--markdown", "dp_size"}, stdoutHas: []string{"| `dp_size` | integer ≥ 1 | 1 |"}, stdoutNot: []string{"| `engine_type`"}},
		{name: "unknown arg", args: []string{"args", "num_gpu_block"}, code: exitUsage, stdoutNone: true,
			stderrHas: "mocker args: num_gpu_block: not an engine argument; run 'mocker args' for the list"},
		{name: "unknown metric", args: []string{"metrics", "mocker_pins"}, code: exitUsage, stdoutNone: true,
			stderrHas: "mocker metrics: mocker_pins: not a metric of k6/x/mocker"},
		{name: "unknown flag", args: []string{"metrics", "--json"}, code: exitUsage, stdoutNone: true,
			stderrHas: "mocker metrics: flag provided but not defined: -json"},
		{name: "help", args: []string{"args", "-h"}, stdoutHas: []string{argsUsage}},
		{name: "help via help", args: []string{"help", "metrics"}, stdoutHas: []string{metricsUsage}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := dispatchOut(tc.args...)
			assert.Equal(t, tc.code, code, stderr)
			for _, s := range tc.stdoutHas {
				assert.Contains(t, stdout, s)
			}
			for _, s := range tc.stdoutNot {
				assert.NotContains(t, stdout, s)
			}
			if tc.stdoutNone {
				assert.Empty(t, stdout)
			}
			if tc.stderrHas == "" {
				assert.Empty(t, stderr)
			} else {
				assert.Contains(t, stderr, tc.stderrHas)
			}
		})
	}
}

func TestMarkdownCell_EscapesPipes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`"lifo" | "fifo"`, `"lifo" \| "fifo"`},
		{"plain", "plain"},
		{"a|b|c", `a\|b\|c`},
	} {
		assert.Equal(t, tc.want, cell(tc.in))
	}
}

func TestWrap_KeepsWordsAndWidth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		width  int
		indent string
		want   string
	}{
		{"a b c", 3, "", "a b\nc\n"},
		{"alpha beta", 8, "  ", "  alpha\n  beta\n"},
		{"unbreakable-word", 4, "", "unbreakable-word\n"},
		{"", 10, "  ", ""},
	} {
		assert.Equal(t, tc.want, wrap(tc.in, tc.width, tc.indent), "%q at %d", tc.in, tc.width)
	}
}

// TestDocs_ArgsAndMetricsExcerptsAreRealOutput runs each `$ bin/mocker
// args|metrics …` command shown in docs/results.md and compares what it
// prints with the lines the page shows under it.
func TestDocs_ArgsAndMetricsExcerptsAreRealOutput(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "results.md"))
	require.NoError(t, err)
	cmd := regexp.MustCompile(`(?m)^\$ bin/mocker ((?:args|metrics)\b.*)\n`)
	text := string(readme)
	found := cmd.FindAllStringSubmatchIndex(text, -1)
	require.NotEmpty(t, found, "docs/results.md shows mocker args and mocker metrics")
	for _, m := range found {
		args := strings.Fields(text[m[2]:m[3]])
		shown := text[m[1]:]
		// The excerpt ends at a blank line or the end of the block.
		if i := strings.Index(shown, "\n\n"); i >= 0 {
			shown = shown[:i+1]
		}
		if i := strings.Index(shown, "```"); i >= 0 {
			shown = shown[:i]
		}
		code, stdout, stderr := dispatchOut(args...)
		require.Equal(t, 0, code, stderr)
		assert.Equalf(t, stdout, shown, "docs/results.md shows `mocker %s` printing something else", strings.Join(args, " "))
	}
}
