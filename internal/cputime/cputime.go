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

// Faults is how many page faults this process has taken so far, minor and
// major; 0 if the system cannot say. A run's first touch of fresh memory
// faults once per page, so a benchmark that reports it shows how much of
// its CPU time is the kernel handing the heap its pages, a cost that
// varies tenfold between machines (virtual ones pay the most) and that a
// process pays once for memory it reuses.
func Faults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Minflt) + int64(ru.Majflt) //nolint:unconvert // int32 on linux/386 and freebsd/386
}
