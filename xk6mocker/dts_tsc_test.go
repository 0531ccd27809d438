//go:build tsc

// These tests need the TypeScript compiler (Debian: node-typescript) and
// run with `go test -tags tsc ./xk6mocker`.

package xk6mocker

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tsc type-checks files, JavaScript included, against index.d.ts.
func tsc(t *testing.T, files ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("tsc")
	require.NoError(t, err, "the tsc tag needs the TypeScript compiler on PATH (apt-get install node-typescript)")
	args := append([]string{"--noEmit", "--allowJs", "--checkJs", "--strict", "--target", "es2020",
		"--module", "es2020", "--moduleResolution", "node", "--lib", "es2020", "index.d.ts"}, files...)
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}

func TestDTS_ScriptsTypeCheck(t *testing.T) {
	t.Parallel()
	out, err := tsc(t, "testdata/types/k6-globals.d.ts", "testdata/types/typed.js", "testdata/readme.js")
	assert.NoError(t, err, "tsc:\n%s", out)
}

// TestDTS_TypeCheckCatchesMistakes makes sure the check checks: every line
// of wrong.js marked "// ERROR" must be reported, and no other.
func TestDTS_TypeCheckCatchesMistakes(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/types/wrong.js")
	require.NoError(t, err)
	var want []int
	for i, line := range strings.Split(string(src), "\n") {
		if strings.Contains(line, "// ERROR") {
			want = append(want, i+1)
		}
	}
	require.NotEmpty(t, want)
	out, err := tsc(t, "testdata/types/wrong.js")
	require.Error(t, err, "tsc accepted a script with type errors:\n%s", out)
	var got []int
	for _, m := range regexp.MustCompile(`wrong\.js\((\d+),\d+\): error`).FindAllStringSubmatch(out, -1) {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		got = append(got, n)
	}
	assert.Equal(t, want, got, "tsc:\n%s", out)
}
