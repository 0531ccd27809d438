package distributed

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReaper_RemovesItsDirAtEndOfInputAndNothingElse: the reaper waits
// for its input to end, then removes local mode's data directory; it
// refuses any other path.
func TestReaper_RemovesItsDirAtEndOfInputAndNothingElse(t *testing.T) {
	dir, err := os.MkdirTemp("", etcdDirPrefix+"1-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "member", "wal"), 0o700))

	r, w := io.Pipe()
	done := make(chan int, 1)
	go func() { done <- reap([]string{dir}, r) }()
	_, err = w.Write([]byte("x"))
	require.NoError(t, err)
	assert.DirExists(t, dir, "kept while its input is open")
	require.NoError(t, w.Close())
	assert.Equal(t, 0, <-done)
	assert.NoDirExists(t, dir)

	other := t.TempDir()
	for _, bad := range [][]string{{other}, {filepath.Join(other, etcdDirPrefix+"1-2")}, {os.TempDir()}, {}, {dir, dir}} {
		assert.Equal(t, exitReaperUsage, reap(bad, strings.NewReader("")), "%q", bad)
	}
	assert.DirExists(t, other)
}
