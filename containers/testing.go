package containers

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvCI, when true (any spelling strconv.ParseBool accepts: "true", "1",
// "TRUE", ...), turns a missing Docker engine from a skip into a failure, so
// CI cannot pass by skipping every container test.
const EnvCI = "CI"

// testStartTimeout covers a cold start: compiling etcd from source on a
// busy two-core machine takes minutes.
const testStartTimeout = 15 * time.Minute

var (
	dockerOnce sync.Once
	dockerErr  error
)

// RequireDocker skips the test when no Docker engine is reachable, saying
// why, or fails it when CI=true. The engine is probed once per process.
func RequireDocker(t testing.TB) {
	t.Helper()
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dockerErr = Ping(ctx)
	})
	if dockerErr == nil {
		return
	}
	fatal, msg := dockerVerdict(dockerErr, os.Getenv(EnvCI))
	if fatal {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// dockerVerdict decides what a missing engine means for a test: a failure
// when ci (the CI variable) is true, a skip when it is unset or false, with
// a message that says how to change it. A value that is not a boolean is a
// failure too: it most likely comes from a CI system, and a typo must not
// turn every container test into a skip.
func dockerVerdict(err error, ci string) (fatal bool, msg string) {
	ci = strings.TrimSpace(ci)
	if ci == "" {
		return false, fmt.Sprintf("docker not available: %v; set CI=true to make this a failure", err)
	}
	on, perr := strconv.ParseBool(ci)
	switch {
	case perr != nil:
		return true, fmt.Sprintf("docker not available: %v (CI=%q is not a boolean; set it to true or false)", err, ci)
	case on:
		return true, fmt.Sprintf("docker not available: %v (CI=%s makes a missing engine a failure)", err, ci)
	}
	return false, fmt.Sprintf("docker not available: %v; set CI=true to make this a failure", err)
}

// EtcdForTest starts etcd for the test and terminates it when the test ends.
func EtcdForTest(t testing.TB, opts ...Option) *Etcd {
	t.Helper()
	RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	e, err := StartEtcd(ctx, opts...)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() { terminateForTest(t, e.Terminate) })
	return e
}

// NATSForTest starts NATS for the test and terminates it when the test ends.
func NATSForTest(t testing.TB, opts ...Option) *NATS {
	t.Helper()
	RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	n, err := StartNATS(ctx, opts...)
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(func() { terminateForTest(t, n.Terminate) })
	return n
}

// Stack is the pair of services mocker's distributed mode needs.
type Stack struct {
	Etcd *Etcd
	NATS *NATS
}

// StackForTest starts etcd and NATS in parallel, waits until both are ready,
// and terminates both when the test ends. If one fails the other is removed.
func StackForTest(t testing.TB) *Stack {
	t.Helper()
	RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()

	var (
		wg               sync.WaitGroup
		etcd             *Etcd
		nats             *NATS
		etcdErr, natsErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		etcd, etcdErr = StartEtcd(ctx)
	}()
	go func() {
		defer wg.Done()
		nats, natsErr = StartNATS(ctx)
	}()
	wg.Wait()
	if etcd != nil {
		t.Cleanup(func() { terminateForTest(t, etcd.Terminate) })
	}
	if nats != nil {
		t.Cleanup(func() { terminateForTest(t, nats.Terminate) })
	}
	if etcdErr != nil || natsErr != nil {
		t.Fatalf("start stack: etcd: %v; nats: %v", etcdErr, natsErr)
	}
	return &Stack{Etcd: etcd, NATS: nats}
}

func terminateForTest(t testing.TB, terminate func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := terminate(ctx); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}
