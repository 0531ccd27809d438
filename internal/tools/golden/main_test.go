package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWrite_SameOutputTwice: two runs of a tree write the same files,
// byte for byte (the comparison golden exists for would otherwise report
// differences that are not there), and every shape and script has its
// files.
func TestWrite_SameOutputTwice(t *testing.T) {
	all := shapes()
	some := []shape{all[0], all[5], all[8]} // vLLM disaggregated, vLLM aggregated, SGLang disaggregated
	for i := range some {
		some[i].n = 200
	}
	script := []string{filepath.Join("..", "..", "..", "scripts", "quickstart.js")}
	a, b := t.TempDir(), t.TempDir()
	require.NoError(t, write(a, some, script))
	require.NoError(t, write(b, some, script))

	var files int
	require.NoError(t, filepath.WalkDir(a, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(a, path)
		require.NoError(t, err)
		x, err := os.ReadFile(path)
		require.NoError(t, err)
		y, err := os.ReadFile(filepath.Join(b, rel))
		require.NoError(t, err, rel)
		require.True(t, bytes.Equal(x, y), "%s differs between two runs", rel)
		require.NotEmpty(t, x, rel)
		files++
		return nil
	}))
	require.Equal(t, 3*4+3, files, "results, stats, series and events per shape; summary, NDJSON and stdout per script")
	stdout, err := os.ReadFile(filepath.Join(a, "scripts", "quickstart.stdout"))
	require.NoError(t, err)
	require.Contains(t, string(stdout), "aborted 255", "the quickstart's summary")
}
