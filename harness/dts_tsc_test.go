//go:build tsc

// These tests need the TypeScript compiler (Debian: node-typescript) and
// run with `go test -tags tsc ./harness`.

package harness

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

func tscNetwork(t *testing.T, files ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("tsc")
	require.NoError(t, err, "the tsc tag needs the TypeScript compiler on PATH (apt-get install node-typescript)")
	args := append([]string{"--noEmit", "--allowJs", "--checkJs", "--strict", "--target", "es2020",
		"--module", "es2020", "--moduleResolution", "node", "--lib", "es2020", "index.d.ts", "testdata/types/globals.d.ts"}, files...)
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}

func TestDTS_NetworkScriptsTypeCheck(t *testing.T) {
	t.Parallel()
	out, err := tscNetwork(t, "testdata/types/network.js")
	assert.NoError(t, err, "tsc:\n%s", out)
}

// TestDTS_NetworkTypeCheckCatchesMistakes: every line of wrong.js marked
// ERROR is reported, and no other.
func TestDTS_NetworkTypeCheckCatchesMistakes(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/types/wrong.js")
	require.NoError(t, err)
	want := map[int]bool{}
	for i, line := range strings.Split(string(src), "\n") {
		if strings.HasSuffix(line, "// ERROR") {
			want[i+1] = true
		}
	}
	out, _ := tscNetwork(t, "testdata/types/wrong.js")
	got := map[int]bool{}
	for _, m := range regexp.MustCompile(`wrong\.js\((\d+),`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		got[n] = true
	}
	assert.Equal(t, want, got, "tsc:\n%s", out)
}
