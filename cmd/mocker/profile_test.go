package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestProfilePath: the one-process commands profile to the file named;
// a worker to a file of its own, so a distributed run's workers, which
// inherit the environment, neither write over the run's profile nor each
// other's; other commands, and no variable, profile nothing.
func TestProfilePath(t *testing.T) {
	for _, cmd := range []string{"run", "replay", "sweep", "serve"} {
		assert.Equal(t, "/tmp/p", profilePath([]string{cmd, "x"}, "/tmp/p", 7), cmd)
	}
	assert.Equal(t, "/tmp/p.worker-7", profilePath([]string{"worker", "--role", "prefill"}, "/tmp/p", 7))
	assert.Empty(t, profilePath([]string{"args"}, "/tmp/p", 7))
	assert.Empty(t, profilePath([]string{"run"}, "", 7))
	assert.Empty(t, profilePath(nil, "/tmp/p", 7))
}
