//go:build !linux

package distributed

import "os/exec"

// setChildAttrs has nothing to set where the parent's death cannot be
// tied to its children's.
func setChildAttrs(*exec.Cmd) {}

// processAlive cannot tell here: every process is taken to be alive, so
// no data directory is removed as stale.
func processAlive(int) bool { return true }
