//go:build !linux

package distributed

import "os/exec"

// setChildAttrs has nothing to set where the parent's death cannot be
// tied to its children's.
func setChildAttrs(*exec.Cmd) {}
