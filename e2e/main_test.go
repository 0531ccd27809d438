package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvstrand/mocker/containers"

	"github.com/kvstrand/mocker/internal/leakcheck"
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
	os.Exit(leakcheck.After(code))
}
