package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/kvstrand/mocker/serve"
)

// workerPorts serves each worker rank's own endpoint (serve.Workers) on
// the host of --listen at port base + i, i the rank's place in
// srv.Workers(): the cluster's workers in config order (aggregated, or
// prefill then decode), each worker's ranks in order. It logs the port of
// each, and sends a listener's failure to errc.
type workerPorts struct {
	servers []*http.Server
}

func startWorkerPorts(srv *serve.Server, listen string, base, maxConns int, log *slog.Logger, errc chan<- error) (*workerPorts, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", listen, err)
	}
	ws := srv.Workers()
	if last := base + len(ws) - 1; base < 1 || last > 65535 {
		return nil, fmt.Errorf("--worker-ports %d: the %d worker ranks need ports %d to %d, within [1, 65535]", base, len(ws), base, last)
	}
	wp := &workerPorts{}
	for i, w := range ws {
		addr := net.JoinHostPort(host, strconv.Itoa(base+i))
		ln, err := serve.Listen(addr, maxConns)
		if err != nil {
			wp.shutdown(context.Background())
			return nil, fmt.Errorf("--worker-ports %d: %s of worker %s dp_rank %d: %w", base, addr, w.Name, w.DPRank, err)
		}
		hs := &http.Server{Handler: w.Handler, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
		wp.servers = append(wp.servers, hs)
		go func() {
			if err := hs.Serve(ln); err != nil && err != http.ErrServerClosed {
				errc <- fmt.Errorf("%s (worker %s dp_rank %d): %w", addr, w.Name, w.DPRank, err)
			}
		}()
		log.Info("worker endpoint", "index", i, "addr", ln.Addr().String(), "worker", w.Name, "dp_rank", w.DPRank, "role", w.Role)
	}
	return wp, nil
}

// shutdown stops every worker endpoint, waiting for requests in flight
// until ctx ends.
func (wp *workerPorts) shutdown(ctx context.Context) {
	if wp == nil {
		return
	}
	for _, hs := range wp.servers {
		_ = hs.Shutdown(ctx)
	}
}
