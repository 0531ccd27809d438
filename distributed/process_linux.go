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

// processAlive reports whether process pid exists (a process of another
// user counts).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
