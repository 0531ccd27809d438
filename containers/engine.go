package containers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// Labels put on every container this package starts. LabelOwner is what
// [Sweep] filters on; the process labels let it tell a leftover from a
// container that belongs to a test binary still running.
const (
	LabelOwner   = "org.kvstrand.mocker"
	LabelSession = "org.kvstrand.mocker.session"
	LabelPID     = "org.kvstrand.mocker.pid"
	LabelHost    = "org.kvstrand.mocker.host"
)

// reaperImage is the Ryuk image testcontainers-go v0.45.0 starts to garbage
// collect containers. Without a registry it cannot be pulled, and a missing
// reaper fails every container start, so it is disabled unless present.
const reaperImage = "testcontainers/ryuk:0.14.0"

// envRyukDisabled is read by testcontainers-go once, at its first use;
// envHostOverride each time a provider resolves the host of published ports.
const (
	envRyukDisabled = "TESTCONTAINERS_RYUK_DISABLED"
	envHostOverride = "TESTCONTAINERS_HOST_OVERRIDE"
)

// staleAfter is how old a container owned by another host must be before
// Sweep treats it as abandoned: its owner's liveness cannot be checked.
const staleAfter = 2 * time.Hour

// session identifies this process's containers.
var session = newSessionID()

func newSessionID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return strconv.Itoa(os.Getpid())
	}
	return hex.EncodeToString(b[:])
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

// ownerLabels are the labels every container and network of this process gets.
func ownerLabels() map[string]string {
	return map[string]string{
		LabelOwner:   "1",
		LabelSession: session,
		LabelPID:     strconv.Itoa(os.Getpid()),
		LabelHost:    hostname(),
	}
}

// engine is the Docker engine this process talks to, resolved once.
type engine struct {
	cli *client.Client
	// goarch is the engine's architecture in GOARCH terms: local images hold
	// binaries built for it, whatever the host running go build is.
	goarch string
	// loopback is true when the engine publishes ports on this machine, so a
	// free loopback port can be picked here and bound explicitly, which keeps
	// endpoints stable across restarts.
	loopback bool
}

var (
	engineMu   sync.Mutex
	engineVal  *engine
	reaperOnce sync.Once
)

// configureReaper disables testcontainers' reaper (Ryuk) unless its image is
// on the engine: without a registry it cannot be pulled, and a missing
// reaper fails every container start. testcontainers-go reads the setting
// once, at its first use, so this runs before anything else of it, with a
// plain engine client. An explicit TESTCONTAINERS_RYUK_DISABLED is left alone.
func configureReaper(ctx context.Context) {
	reaperOnce.Do(func() {
		if _, set := os.LookupEnv(envRyukDisabled); set {
			return
		}
		present := false
		if cli, err := client.New(client.FromEnv); err == nil {
			ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = cli.ImageInspect(ictx, reaperImage)
			cancel()
			present = err == nil
			_ = cli.Close()
		}
		if !present {
			slog.Debug("containers: reaper image absent, disabling it; Terminate and Sweep remove containers",
				"image", reaperImage)
			_ = os.Setenv(envRyukDisabled, "true")
		}
	})
}

// configureHost pins the host of published ports to localhost when the
// engine runs in this network namespace. testcontainers-go assumes that a
// process inside a container (one with /.dockerenv) talks to a
// sibling-container daemon and looks for published ports at the default
// gateway; when the daemon's bridge gateway is one of our own addresses the
// ports are on loopback here, and probing the gateway would send readiness
// checks off the machine. testcontainers-go reads TESTCONTAINERS_HOST_OVERRIDE
// each time it resolves the host; an explicit value is left alone.
func configureHost(ctx context.Context, cli *client.Client) {
	if _, set := os.LookupEnv(envHostOverride); set {
		return
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if daemonSharesNetwork(ictx, cli) {
		_ = os.Setenv(envHostOverride, "localhost")
	}
}

// daemonSharesNetwork reports whether the engine's default bridge gateway is
// an address of this machine, which means published ports are reachable on
// loopback here.
func daemonSharesNetwork(ctx context.Context, cli *client.Client) bool {
	if !strings.HasPrefix(cli.DaemonHost(), "unix://") {
		return false
	}
	res, err := cli.NetworkInspect(ctx, "bridge", client.NetworkInspectOptions{})
	if err != nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, cfg := range res.Network.IPAM.Config {
		gw := cfg.Gateway
		if !gw.IsValid() && cfg.Subnet.IsValid() {
			// Older engines omit the default bridge's gateway; it is the
			// subnet's first address.
			gw = cfg.Subnet.Masked().Addr().Next()
		}
		if !gw.IsValid() {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(net.IP(gw.AsSlice())) {
				return true
			}
		}
	}
	return false
}

// getEngine connects to the Docker engine, caching only success so that a
// caller can retry once the engine comes up.
func getEngine(ctx context.Context) (*engine, error) {
	engineMu.Lock()
	defer engineMu.Unlock()
	if engineVal != nil {
		return engineVal, nil
	}
	configureReaper(ctx)

	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	dc, err := testcontainers.NewDockerClientWithOpts(cctx)
	if err != nil {
		return nil, fmt.Errorf("connect to docker engine (is the daemon running and DOCKER_HOST right?): %w", err)
	}
	ver, err := dc.ServerVersion(cctx, client.ServerVersionOptions{})
	if err != nil {
		_ = dc.Close()
		return nil, fmt.Errorf("docker engine version: %w", err)
	}
	e := &engine{cli: dc.Client, goarch: goArch(ver.Arch)}
	configureHost(cctx, dc.Client)

	provider, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(tcLogger{}))
	if err != nil {
		_ = dc.Close()
		return nil, fmt.Errorf("testcontainers docker provider: %w", err)
	}
	daemonHost, err := provider.DaemonHost(cctx)
	_ = provider.Close()
	if err != nil {
		_ = dc.Close()
		return nil, fmt.Errorf("docker daemon host: %w", err)
	}
	e.loopback = isLoopbackHost(daemonHost)
	engineVal = e
	return e, nil
}

// goArch maps an engine's reported architecture to GOARCH; engines report
// either Go's names or uname's.
func goArch(arch string) string {
	switch arch {
	case "x86_64":
		return "amd64"
	case "aarch64":
		return "arm64"
	case "armv7l":
		return "arm"
	default:
		return arch
	}
}

func isLoopbackHost(h string) bool {
	switch h {
	case "localhost", "127.0.0.1", "::1", "[::1]":
		return true
	}
	return false
}

// Ping reports whether a Docker engine is reachable, with the reason when not.
func Ping(ctx context.Context) error {
	e, err := getEngine(ctx)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := e.cli.Ping(pctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("ping docker engine: %w", err)
	}
	return nil
}

// Sweep removes containers this package started in earlier runs that were
// never terminated (a test binary killed by its timeout, say). It only
// touches containers labelled org.kvstrand.mocker=1 whose owning process is
// gone — on this host, a process id that no longer exists; on another host,
// a container older than two hours — so concurrent test binaries keep
// theirs. It returns how many it removed. Call it from TestMain.
func Sweep(ctx context.Context) (int, error) {
	e, err := getEngine(ctx)
	if err != nil {
		return 0, err
	}
	res, err := e.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelOwner+"=1"),
	})
	if err != nil {
		return 0, fmt.Errorf("sweep: list containers: %w", err)
	}
	me, now := hostname(), time.Now()
	removed := 0
	var errs []error
	for _, c := range res.Items {
		if !abandoned(c.Labels, time.Unix(c.Created, 0), me, now) {
			continue
		}
		if _, err := e.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			errs = append(errs, fmt.Errorf("sweep: remove container %s: %w", shortID(c.ID), err))
			continue
		}
		slog.Info("containers: removed leftover container", "id", shortID(c.ID), "image", c.Image)
		removed++
	}
	return removed, errors.Join(errs...)
}

// abandoned decides whether a labelled container outlived its owner.
func abandoned(labels map[string]string, created time.Time, me string, now time.Time) bool {
	if labels[LabelSession] == session {
		return false
	}
	pid, err := strconv.Atoi(labels[LabelPID])
	if labels[LabelHost] == me && err == nil {
		return !processAlive(pid)
	}
	return now.Sub(created) > staleAfter
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// tcLogger routes testcontainers' chatter to slog at debug level: it is
// useful when diagnosing the engine, noise otherwise. It never refers to a
// testing.T, so a log line after a test ends cannot panic.
type tcLogger struct{}

func (tcLogger) Printf(format string, v ...any) {
	slog.Debug("testcontainers: " + strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// Disconnect closes this package's connection to the Docker engine, so a
// leak check at the end of TestMain does not see its idle keep-alive
// connections. A later call to any function here reconnects.
func Disconnect() error {
	engineMu.Lock()
	defer engineMu.Unlock()
	if engineVal == nil {
		return nil
	}
	err := engineVal.cli.Close()
	engineVal = nil
	return err
}
