package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRepository_ReferencesPointAtFilesInIt: every Markdown link in the
// repository's documents, and every docs/… or README.md a comment names,
// is a file the repository has; and nothing points at notes kept outside
// it. Someone who clones the repository can follow every reference.
func TestRepository_ReferencesPointAtFilesInIt(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	mdLink := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	named := regexp.MustCompile(`\b((?:docs|scripts)/[A-Za-z0-9_./-]+\.(?:md|js)|README\.md)\b`)
	outside := regexp.MustCompile(`\.\./shared|\bDESIGN(\.md)? §|\breference/(dynamo|k6|peers|serving)`)
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "golden-out":
				return filepath.SkipDir
			}
			if strings.HasPrefix(rel, "internal/tools/") && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		if ext != ".md" && ext != ".go" && ext != ".js" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(b)
		if rel != "cmd/mocker/links_test.go" {
			if m := outside.FindString(text); m != "" {
				t.Errorf("%s points outside the repository: %q", rel, m)
			}
		}
		if ext == ".md" {
			for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
					t.Errorf("%s links to %s, which is not in the repository", rel, target)
				}
			}
			return nil
		}
		for _, line := range strings.Split(text, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, m := range named.FindAllStringSubmatch(line, -1) {
				if strings.Contains(line, "Dynamo's "+m[1]) {
					continue // a path in Dynamo's own repository
				}
				checked++
				if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
					t.Errorf("%s names %s, which is not in the repository", rel, m[1])
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, checked, 20, "the walk found the references it checks")
}
