package distributed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/internal/leakcheck"
)

// TestMain builds the mocker binary once, for local mode to spawn as its
// workers (a test binary cannot be `mocker worker`).
func TestMain(m *testing.M) {
	runServicesChild()
	dir, err := os.MkdirTemp("", "mocker-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin := filepath.Join(dir, "mocker")
	build := exec.Command("go", "build", "-o", bin, "github.com/kvstrand/mocker/cmd/mocker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building mocker for the worker processes: %v\n", err)
		os.Exit(1)
	}
	os.Setenv(WorkerBinaryEnv, bin)
	// An outage loses whatever the in-process workers and routers publish
	// during it, rather than leaving it to the reconnect's timing.
	plane.ReconnectBufSize = -1
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(leakcheck.After(code))
}
