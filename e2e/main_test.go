package e2e

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvstrand/mocker/containers"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := containers.Disconnect(); err != nil {
		fmt.Fprintf(os.Stderr, "disconnect from docker engine: %v\n", err)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines leaked by the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
