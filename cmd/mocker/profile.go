package main

import (
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a CPU profile of the run to path (the environment
// variable MOCKER_CPUPROFILE), for looking at where a run spends its CPU.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
