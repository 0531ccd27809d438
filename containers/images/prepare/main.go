// Command prepare puts the container images mocker's tests need on the local
// Docker engine ahead of the tests: etcd and NATS as MOCKER_IMAGES selects
// (building them from the pinned Go modules when no registry is reachable),
// with -worker the mocker worker image and with -serve the `mocker serve`
// image. Run it from inside the module:
//
//	go run ./containers/images/prepare -worker -serve
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/kvstrand/mocker/containers"
)

func main() {
	worker := flag.Bool("worker", false, "also build the mocker worker image from ./cmd/mocker")
	serveImage := flag.Bool("serve", false, "also build the mocker serve image from ./cmd/mocker")
	timeout := flag.Duration("timeout", 30*time.Minute, "give up after this long")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	err := run(ctx, *worker, *serveImage)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "prepare: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, worker, serveImage bool) error {
	start := time.Now()
	etcd, nats, err := containers.PrepareImages(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("etcd\t%s\nnats\t%s\n", etcd, nats)
	if worker {
		ref, err := containers.BuildWorkerImage(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("worker\t%s\n", ref)
	}
	if serveImage {
		ref, err := containers.BuildServeImage(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("serve\t%s\n", ref)
	}
	slog.Info("images ready", "elapsed", time.Since(start).Round(time.Millisecond))
	return containers.Disconnect()
}
