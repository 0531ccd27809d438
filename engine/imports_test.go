package engine

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEngine_KeepsNoClockAndNoGoroutines: the core is driven, not driving.
// Its code imports nothing that reads the wall clock, sleeps or
// synchronises goroutines; pacing belongs to the drivers outside the
// package (the cluster's loop).
func TestEngine_KeepsNoClockAndNoGoroutines(t *testing.T) {
	forbidden := map[string]bool{"time": true, "sync": true, "sync/atomic": true, "os": true, "net": true}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range parsed.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			assert.False(t, forbidden[path], "%s imports %q: the engine core must not read clocks or start goroutines", f, path)
		}
		checked++
	}
	assert.Greater(t, checked, 10, "the test looked at the package's files")
}
