package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvstrand/mocker/containers"
)

// stack is etcd and NATS on a control network, and a data network that
// only workers join, for their KV transfers: cutting a worker off the data
// network partitions the handoff path while discovery, requests and events
// still flow.
type stack struct {
	ctl, data *containers.Network
	etcd      *containers.Etcd
	nats      *containers.NATS
	image     string
	// secure, when set, is how workers and routers reach a NATS and an
	// etcd that require TLS and a password (newSecureStack).
	secure *stackAuth
}

var (
	imageOnce sync.Once
	imageRef  string
	imageErr  error
)

// workerImage builds the worker image once per test binary; the build is a
// no-op when an image of the same binary exists.
func workerImage(t *testing.T) string {
	t.Helper()
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		imageRef, imageErr = containers.BuildWorkerImage(ctx)
	})
	if imageErr != nil {
		t.Fatalf("worker image: %v", imageErr)
	}
	return imageRef
}

func newNetwork(t *testing.T) *containers.Network {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := containers.NewNetwork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := n.Remove(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return n
}

// newStack starts the networks, etcd and NATS for one test; all go when
// it ends.
func newStack(t *testing.T) *stack {
	t.Helper()
	containers.RequireDocker(t)
	s := &stack{image: workerImage(t)}
	s.ctl = newNetwork(t)
	s.data = newNetwork(t)
	s.etcd = containers.EtcdForTest(t, containers.WithNetwork(s.ctl.Name, "etcd"))
	s.nats = containers.NATSForTest(t, containers.WithNetwork(s.ctl.Name, "nats"))
	return s
}

// pool is a set of workers of one role to start.
type pool struct {
	role  string
	n     int
	first int // index of the first worker's name
	args  map[string]any
}

// startWorkers starts the pools' workers in namespace ns, named
// {role}-{i} as local mode names them, and stops them when the test ends
// (SIGTERM: they drain and revoke their leases).
func (s *stack) startWorkers(t *testing.T, ns, engine string, common map[string]any, pools ...pool) map[string]*containers.Worker {
	t.Helper()
	var specs []containers.WorkerSpec
	for _, p := range pools {
		args := maps.Clone(common)
		maps.Copy(args, p.args)
		name := p.role
		if p.role == "aggregated" {
			name = "worker"
		}
		for i := range p.n {
			specs = append(specs, containers.WorkerSpec{
				Image: s.image, Name: fmt.Sprintf("%s-%d", name, p.first+i), Role: p.role, Engine: engine, Namespace: ns,
				Etcd: s.etcd.NetworkEndpoints(), NATS: s.nats.NetworkURL(), Args: args,
				Network: s.ctl, DataNetwork: s.data, Flags: []string{"--drain-timeout", "10s"},
			})
			if s.secure != nil {
				s.secure.worker(&specs[len(specs)-1])
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ws, err := containers.StartWorkers(ctx, specs...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*containers.Worker{}
	for _, w := range ws {
		out[w.Name] = w
		t.Cleanup(func() {
			if t.Failed() {
				logWorker(t, w)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := w.Terminate(ctx); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}
	return out
}

// logWorker puts the end of a worker's log into the test's output.
func logWorker(t *testing.T, w *containers.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logs, err := w.Logs(ctx)
	if err != nil {
		t.Logf("%s: %v", w.Name, err)
		return
	}
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	t.Logf("--- %s, last log lines ---\n%s", w.Name, strings.Join(lines, "\n"))
}
