package leakcheck

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAfter_KeepsAFailureAndPassesACleanRun(t *testing.T) {
	assert.Equal(t, 3, After(3), "a failed run keeps its code")
	assert.Equal(t, 0, After(0), "no goroutine left behind: still 0")
}

func TestAfter_FailsARunThatLeaks(t *testing.T) {
	stop := make(chan struct{})
	go func() { <-stop }()
	assert.Equal(t, 1, After(0))
	close(stop)
}
