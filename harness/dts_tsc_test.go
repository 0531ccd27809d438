//go:build tsc

// These tests need the TypeScript compiler (Debian: node-typescript) and
// run with `go test -tags tsc ./harness`.

package harness

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/internal/tsctest"
)

func TestDTS_NetworkScriptsTypeCheck(t *testing.T) {
	t.Parallel()
	out, err := tsctest.Check(t, "index.d.ts", "testdata/types/globals.d.ts", "testdata/types/network.js")
	assert.NoError(t, err, "tsc:\n%s", out)
}

// TestDTS_NetworkTypeCheckCatchesMistakes: every line of wrong.js marked
// ERROR is reported, and no other.
func TestDTS_NetworkTypeCheckCatchesMistakes(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/types/wrong.js")
	require.NoError(t, err)
	want := tsctest.MarkedLines(string(src))
	require.NotEmpty(t, want)
	out, err := tsctest.Check(t, "index.d.ts", "testdata/types/globals.d.ts", "testdata/types/wrong.js")
	require.Error(t, err, "tsc accepted a script with type errors:\n%s", out)
	assert.Equal(t, want, tsctest.ErrorLines(t, out, "wrong.js"), "tsc:\n%s", out)
}
