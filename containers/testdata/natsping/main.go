// Command natsping connects to the NATS URL given as its argument, makes a
// round trip to the server and prints "connected to <server id>"; the
// network test runs it in a container next to a NATS container.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: natsping nats://host:port")
		os.Exit(2)
	}
	nc, err := nats.Connect(os.Args[1], nats.Timeout(10*time.Second))
	if err != nil {
		fmt.Fprintf(os.Stderr, "connect %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	defer nc.Close()
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "flush: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("connected to %s\n", nc.ConnectedServerId())
}
