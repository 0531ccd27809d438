package serve

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(serveChild())
	}
	if v := os.Getenv(benchChildEnv); v != "" {
		os.Exit(serveBenchChild(v))
	}
	goleak.VerifyTestMain(m)
}
