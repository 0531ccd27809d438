// Package leakcheck is the goroutine-leak check of test binaries that run
// etcd and NATS clients: goleak, less the library goroutines that outlive
// a closed client by design.
package leakcheck

import (
	"fmt"
	"os"

	"go.uber.org/goleak"
)

// Known are the library goroutines that live for the process once an etcd
// client or embedded etcd has run: grpc's callback serializer of the
// client-side balancer, the opencensus worker grpc starts, and glog's
// flusher.
var Known = []goleak.Option{
	goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
}

// After turns a test binary's exit code into a failing one when the tests
// passed but left goroutines behind, saying which on stderr.
func After(code int) int {
	if code != 0 {
		return code
	}
	if err := goleak.Find(Known...); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: goroutines leaked by the tests:\n%v\n", err)
		return 1
	}
	return 0
}
