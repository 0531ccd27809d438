package containers_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvstrand/mocker/containers"
)

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

	code := m.Run()
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

// knownBackgroundGoroutines would list library goroutines that outlive the
// tests by design. None is needed: testcontainers-go closes its providers'
// engine clients after each call, Disconnect closes this package's, the
// reaper (whose connection goroutine would linger) is disabled here, and the
// tests close their etcd and NATS clients. Add an entry only for a named
// library goroutine, with the reason.
var knownBackgroundGoroutines []goleak.Option
