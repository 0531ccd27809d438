//go:build unix

// Package cputime reads the CPU time this process has used, the measure
// benchmarks report per unit of work on a shared machine where wall times
// swing.
package cputime

import (
	"syscall"
	"time"
)

// Self is the CPU time (user + system) this process has used so far; 0 if
// the system cannot say.
func Self() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
