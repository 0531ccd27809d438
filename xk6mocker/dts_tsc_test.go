//go:build tsc

// These tests need the TypeScript compiler (Debian: node-typescript) and
// run with `go test -tags tsc ./xk6mocker`.

package xk6mocker

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/internal/tsctest"
)

// tsc type-checks files, JavaScript included, against index.d.ts.
func tsc(t *testing.T, files ...string) (string, error) {
	t.Helper()
	return tsctest.Check(t, append([]string{"index.d.ts"}, files...)...)
}

func TestDTS_ScriptsTypeCheck(t *testing.T) {
	t.Parallel()
	out, err := tsc(t, "testdata/types/k6-globals.d.ts", "testdata/types/typed.js", "testdata/readme.js", "../scripts/replay.js")
	assert.NoError(t, err, "tsc:\n%s", out)
}

// TestDTS_TypeCheckCatchesMistakes makes sure the check checks: every line
// of wrong.js marked "// ERROR" must be reported, and no other.
func TestDTS_TypeCheckCatchesMistakes(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/types/wrong.js")
	require.NoError(t, err)
	want := tsctest.MarkedLines(string(src))
	require.NotEmpty(t, want)
	out, err := tsc(t, "testdata/types/wrong.js")
	require.Error(t, err, "tsc accepted a script with type errors:\n%s", out)
	got := tsctest.ErrorLines(t, out, "wrong.js")
	assert.Equal(t, want, got, "tsc:\n%s", out)
}
