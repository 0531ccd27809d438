// Package benchchild runs a test binary again as a child process that
// serves something until its standard input closes, so that a benchmark
// measures its own process's CPU apart from the server's (or the
// server's apart from its clients').
package benchchild

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Start runs the test binary again with env ("NAME=value") added to its
// environment, which its TestMain reads to serve instead of testing; the
// child prints the address it serves on as its first line, which Start
// returns. The child runs with as many Ps as the benchmark runs with now
// (GOMAXPROCS, which -test.cpu sets), so that "-cpu 1" measures a
// one-P server. The child is stopped when tb ends, by closing its
// standard input.
func Start(tb testing.TB, env string) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env, "GOMAXPROCS="+strconv.Itoa(runtime.GOMAXPROCS(0)))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("the serving child (%s) did not start: %v", env, err)
	}
	return strings.TrimSpace(addr)
}
