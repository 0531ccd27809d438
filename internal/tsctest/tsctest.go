// Package tsctest type-checks JavaScript against TypeScript declarations
// with the TypeScript compiler, for the tests built with the tsc tag (go
// test -tags tsc), which need tsc on PATH (Debian: node-typescript).
package tsctest

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Check runs tsc in strict mode, without emitting, over files
// (declarations and JavaScript alike), and returns its output; the error
// is tsc's when it reported any problem.
func Check(t testing.TB, files ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("tsc")
	require.NoError(t, err, "the tsc tag needs the TypeScript compiler on PATH (apt-get install node-typescript)")
	args := append([]string{"--noEmit", "--allowJs", "--checkJs", "--strict", "--target", "es2020",
		"--module", "es2020", "--moduleResolution", "node", "--lib", "es2020"}, files...)
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}

// MarkedLines are the numbers (from 1) of the lines of src that carry the
// marker "// ERROR": those a type check must reject.
func MarkedLines(src string) []int {
	var out []int
	for i, line := range strings.Split(src, "\n") {
		if strings.Contains(line, "// ERROR") {
			out = append(out, i+1)
		}
	}
	return out
}

// ErrorLines are the line numbers tsc's output reports errors on in the
// file whose name ends with base, in the order reported.
func ErrorLines(t testing.TB, out, base string) []int {
	t.Helper()
	var lines []int
	re := regexp.MustCompile(regexp.QuoteMeta(base) + `\((\d+),\d+\): error`)
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		lines = append(lines, n)
	}
	return lines
}
