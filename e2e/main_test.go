package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvstrand/mocker/containers"
)

// mockerBin is the mocker binary the matrix runs its scenarios with. It is
// built without the race detector whatever the test binary is built with:
// the router paces modeled time against the wall clock, and a router slowed
// several-fold would turn its own lag into modeled delays the cells do not
// mean to measure.
var mockerBin string

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if err := containers.Ping(ctx); err == nil {
		if n, err := containers.Sweep(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "sweep leftover containers: %v\n", err)
		} else if n > 0 {
			fmt.Fprintf(os.Stderr, "removed %d leftover containers\n", n)
		}
	}
	cancel()

	dir, err := os.MkdirTemp("", "mocker-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mockerBin = filepath.Join(dir, "mocker")
	build := exec.Command("go", "build", "-o", mockerBin, "github.com/kvstrand/mocker/cmd/mocker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building mocker for the scenarios: %v\n", err)
		os.Exit(1)
	}

	code := m.Run()
	_ = os.RemoveAll(dir)
	if err := containers.Disconnect(); err != nil {
		fmt.Fprintf(os.Stderr, "disconnect from docker engine: %v\n", err)
	}
	if code == 0 {
		if err := goleak.Find(knownBackgroundGoroutines...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines leaked by the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// knownBackgroundGoroutines are library goroutines that outlive a closed
// etcd client by design: grpc's callback serializer of the client-side
// balancer, and the opencensus worker grpc starts for the process.
var knownBackgroundGoroutines = []goleak.Option{
	goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
}
