package distributed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// TestMain builds the mocker binary once, for local mode to spawn as its
// workers (a test binary cannot be `mocker worker`).
func TestMain(m *testing.M) {
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
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(knownBackgroundGoroutines...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines leaked by the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// knownBackgroundGoroutines are library goroutines that outlive a closed
// embedded etcd by design: its client-side balancer and the zap/grpc
// loggers' background flushers live for the process.
var knownBackgroundGoroutines = []goleak.Option{
	goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
}
