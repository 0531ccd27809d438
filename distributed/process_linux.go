package distributed

import (
	"os/exec"
	"syscall"
)

// setChildAttrs makes a spawned worker die with this process, so a crashed
// or killed script leaves no worker behind.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
