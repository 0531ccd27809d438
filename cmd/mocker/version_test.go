package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuildInfo_SaysWhichBuildInOneLine(t *testing.T) {
	t.Parallel()
	const rev = "57c574817cc204c1e372aad7748d069c01e07b02"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-12-03T21:54:34Z"}, {Key: "vcs.modified", Value: modified},
		}
	}
	tests := []struct {
		name   string
		bi     *debug.BuildInfo
		linked string
		line   string
		text   []string
	}{
		{"a checkout, modified",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261203215434-57c574817cc2+dirty"}, Settings: vcs("true")}, "",
			"revision 57c574817cc2 (2026-12-03T21:54:34Z, modified), go1.26.8",
			[]string{"mocker v0.0.0-20261203215434-57c574817cc2+dirty\n", "  revision  " + rev + "\n", "  time      2026-12-03T21:54:34Z\n", "  modified  true\n", "  go        go1.26.8 "}},
		{"a clean checkout the go command gave no version",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs("false")}, "",
			"revision 57c574817cc2 (2026-12-03T21:54:34Z), go1.26.8",
			[]string{"mocker (devel)\n", "  modified  false\n"}},
		{"a release from the module proxy",
			&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}}, "",
			"v1.2.3, go1.26.0",
			[]string{"mocker v1.2.3\n", "  go        go1.26.0 "}},
		{"a tagged checkout",
			&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}, Settings: vcs("false")}, "",
			"v1.2.3 revision 57c574817cc2 (2026-12-03T21:54:34Z), go1.26.0",
			[]string{"mocker v1.2.3\n", "  revision  " + rev + "\n"}},
		{"no VCS information",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "",
			"(devel), go1.26.8",
			[]string{"mocker (devel)\n", "  revision  unknown: built outside a git checkout, or with -buildvcs=false\n"}},
		{"a version set at link time",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "v2.0.0-rc1",
			"v2.0.0-rc1, go1.26.8",
			[]string{"mocker v2.0.0-rc1\n"}},
		{"no build info", nil, "",
			"(devel), " + runtime.Version(),
			[]string{"mocker (devel)\n", "  go        " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBuildInfo(tc.bi, tc.linked)
			assert.Equal(t, tc.line, b.Line())
			assert.NotContains(t, b.Line(), "\n")
			text := b.Text()
			for _, want := range tc.text {
				assert.Contains(t, text, want)
			}
			assert.True(t, strings.HasSuffix(text, "\n"))
		})
	}
}

// TestVersion_FromAGitCheckoutShowsItsRevision: mocker built with `go
// build` in a git checkout says which commit it came from, and whether the
// tree had changes, in `mocker version` and in the `mocker run` banner.
// The module's files are committed to a fresh repository of the test's
// own, so the commit is known and the tree clean whatever the state of
// the checkout the test runs in (a git worktree, whose .git is a file, is
// one the go command does not stamp).
func TestVersion_FromAGitCheckoutShowsItsRevision(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("this test needs git on PATH: %v", err)
	}
	src := copyModule(t)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=mocker test", "-c", "user.email=test@example.invalid",
			"-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = src
		// Only ever the test's own repository, whatever git would find
		// around it.
		cmd.Env = append(os.Environ(), "GIT_DIR="+filepath.Join(src, ".git"), "GIT_WORK_TREE="+src, "GIT_CEILING_DIRECTORIES="+filepath.Dir(src))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	require.Equal(t, src, git("rev-parse", "--show-toplevel"), "the test's repository is its copy of the module")
	git("add", "-A")
	git("commit", "-q", "-m", "the module as the test found it")
	rev := git("rev-parse", "HEAD")
	require.Len(t, rev, 40)

	bin := filepath.Join(t.TempDir(), "mocker")
	build := func() {
		t.Helper()
		// -buildvcs=true over whatever GOFLAGS says: the build must stamp
		// the revision, or fail saying why.
		cmd := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/mocker")
		cmd.Dir = src
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build: %s", out)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		require.NoError(t, err, "mocker %s: %s", strings.Join(args, " "), out)
		return string(out)
	}
	script := filepath.Join(t.TempDir(), "one.js")
	require.NoError(t, os.WriteFile(script, []byte("export const options = { iterations: 1 };\nexport default function () {}\n"), 0o600))

	build()
	out := run("version")
	assert.Contains(t, out, "  revision  "+rev+"\n")
	assert.Contains(t, out, "  modified  false\n")
	assert.Regexp(t, `(?m)^  time      \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, out)
	assert.Regexp(t, `(?m)^  go        go1\.\d+`, out)
	banner := run("run", "--clock", "virtual", "--no-color", script)
	assert.Regexp(t, `(?m)^    version: mocker revision `+rev[:12]+` \(\d{4}-[^,)]+\), go1\.\d+`, banner)

	// A change to the tree after the commit shows.
	require.NoError(t, os.WriteFile(filepath.Join(src, "CHANGED"), []byte("a change\n"), 0o600))
	build()
	assert.Contains(t, run("version"), "  modified  true\n")
	assert.Regexp(t, `(?m)^    version: mocker revision `+rev[:12]+` \([^)]*, modified\), go1\.\d+`, run("run", "--clock", "virtual", "--no-color", script))
}

// copyModule copies the module's files (not its .git, which is a file in
// a git worktree, nor hidden directories or build output) to a temporary
// directory and returns it.
func copyModule(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the module root")
	dst := t.TempDir()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.Name() == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin" || rel == "golden-out") {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	require.NoError(t, err)
	return dst
}
