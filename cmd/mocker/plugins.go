package main

// The JS modules a mocker script can import beyond k6's own: each package
// registers itself with the harness from its init function.
import (
	_ "github.com/kvstrand/mocker/distributed" // transport: {...} and 'local' in mocker.cluster()
	_ "github.com/kvstrand/mocker/xk6mocker"   // k6/x/mocker
)
