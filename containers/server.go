package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Option adjusts how a server container is started.
type Option func(*options)

type options struct {
	strategy       *ImageStrategy
	args           []string
	startupTimeout time.Duration
	network        string
	aliases        []string
	secure         *Secure
}

// WithArgs appends command-line flags to the server's own (for example "-js"
// to enable JetStream in NATS).
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// WithStartupTimeout bounds the wait for readiness after each start; the
// default is one minute.
func WithStartupTimeout(d time.Duration) Option {
	return func(o *options) { o.startupTimeout = d }
}

// WithNetwork attaches the container to a Docker network under the given
// aliases, so other containers (mocker workers) reach it by name.
func WithNetwork(name string, aliases ...string) Option {
	return func(o *options) {
		o.network = name
		o.aliases = aliases
	}
}

func buildOptions(opts []Option) (options, error) {
	o := options{startupTimeout: time.Minute}
	for _, opt := range opts {
		opt(&o)
	}
	if o.secure != nil {
		if err := o.secure.validate(); err != nil {
			return o, err
		}
	}
	if o.strategy == nil {
		s, err := ImageStrategyFromEnv()
		if err != nil {
			return o, err
		}
		o.strategy = &s
	}
	return o, nil
}

// serverSpec is what differs between etcd and NATS.
type serverSpec struct {
	kind       string // "etcd", "nats": names errors and logs
	image      serverImage
	entrypoint []string
	// cmd builds the command line once host ports are known, since etcd
	// advertises its client URL.
	cmd   func(hostPorts map[string]string) []string
	ports []string // container ports, e.g. "2379/tcp"; the first is the client port
	// wait is the readiness check, re-run after every start.
	wait func(timeout time.Duration) wait.Strategy
	// files, when set, gives the files to copy into the container before
	// it starts (called for each attempt: a reader is read once).
	files func() []testcontainers.ContainerFile
}

// server is a running (or stopped) server container with fixed host ports.
// Etcd and NATS embed it, so its exported methods are theirs: the container
// lifecycle is the same whichever server runs inside.
type server struct {
	kind string
	ctr  testcontainers.Container

	mu         sync.Mutex
	host       string
	hostPorts  map[string]string // container port -> host port
	loopback   bool
	terminated bool
}

// maxPortAttempts bounds retries when a picked free port is taken between
// picking and binding, by another test binary for instance.
const maxPortAttempts = 3

// startServer obtains the image and starts the container, waiting until the
// server is ready.
func startServer(ctx context.Context, spec serverSpec, o options) (*server, error) {
	e, err := getEngine(ctx)
	if err != nil {
		return nil, err
	}
	ref, source, err := resolveImage(ctx, *o.strategy, spec.image, engineBackend{e})
	if err != nil {
		return nil, fmt.Errorf("%s image: %w", spec.kind, err)
	}
	slog.Debug("containers: starting", "kind", spec.kind, "image", ref, "source", string(source))

	var lastErr error
	for attempt := 0; attempt < maxPortAttempts; attempt++ {
		s, err := startOnce(ctx, e, spec, o, ref)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !isPortConflict(err) || ctx.Err() != nil {
			break
		}
		slog.Debug("containers: host port taken, retrying", "kind", spec.kind, "err", err)
	}
	return nil, lastErr
}

func startOnce(ctx context.Context, e *engine, spec serverSpec, o options, ref string) (*server, error) {
	hostPorts := make(map[string]string, len(spec.ports))
	bindings := network.PortMap{}
	for _, p := range spec.ports {
		port, err := network.ParsePort(p)
		if err != nil {
			return nil, fmt.Errorf("%s: container port %q: %w", spec.kind, p, err)
		}
		if e.loopback {
			hp, err := freePort()
			if err != nil {
				return nil, fmt.Errorf("%s: pick a free host port: %w", spec.kind, err)
			}
			hostPorts[p] = hp
			bindings[port] = []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: hp}}
		} else {
			// A remote engine picks its own ports; they may change on restart
			// and are re-read after each start.
			hostPorts[p] = ""
			bindings[port] = []network.PortBinding{{HostPort: "0"}}
		}
	}
	labels := ownerLabels()
	labels[LabelOwner+".kind"] = spec.kind
	req := testcontainers.ContainerRequest{
		Image:        ref,
		Entrypoint:   spec.entrypoint,
		Cmd:          append(spec.cmd(hostPorts), o.args...),
		ExposedPorts: spec.ports,
		Labels:       labels,
		WaitingFor:   spec.wait(o.startupTimeout),
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.PortBindings = maps.Clone(bindings)
		},
	}
	if spec.files != nil {
		req.Files = spec.files()
	}
	if o.network != "" {
		req.Networks = []string{o.network}
		req.NetworkAliases = map[string][]string{o.network: o.aliases}
	}
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req,
		Started:          true,
		Logger:           tcLogger{},
	})
	if err != nil {
		err = fmt.Errorf("start %s container (image %s): %w%s", spec.kind, ref, err, logTail(ctr))
		if ctr != nil {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if terr := ctr.Terminate(tctx); terr != nil {
				err = errors.Join(err, fmt.Errorf("remove failed %s container: %w", spec.kind, terr))
			}
		}
		return nil, err
	}
	s := &server{kind: spec.kind, ctr: ctr, hostPorts: hostPorts, loopback: e.loopback}
	if err := s.refreshEndpoints(ctx); err != nil {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return nil, errors.Join(err, ctr.Terminate(tctx))
	}
	return s, nil
}

// refreshEndpoints reads the host and, on a remote engine, the ports the
// engine chose.
func (s *server) refreshEndpoints(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loopback {
		s.host = "127.0.0.1"
		return nil
	}
	host, err := s.ctr.Host(ctx)
	if err != nil {
		return fmt.Errorf("%s: container host: %w", s.kind, err)
	}
	s.host = host
	for p := range s.hostPorts {
		mp, err := s.ctr.MappedPort(ctx, p)
		if err != nil {
			return fmt.Errorf("%s: mapped port %s: %w", s.kind, p, err)
		}
		s.hostPorts[p] = strconv.Itoa(int(mp.Num()))
	}
	return nil
}

// addr is host:port on the Docker host for a container port.
func (s *server) addr(port string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort(s.host, s.hostPorts[port])
}

// ContainerID identifies the container to the Docker engine.
func (s *server) ContainerID() string { return s.ctr.GetContainerID() }

// Stop stops the container, keeping it and the data the server stored for
// Start.
func (s *server) Stop(ctx context.Context) error {
	timeout := 10 * time.Second
	if err := s.ctr.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("stop %s container %s: %w", s.kind, shortID(s.ctr.GetContainerID()), err)
	}
	return nil
}

// Start starts a stopped container again and waits until the server is
// healthy.
func (s *server) Start(ctx context.Context) error {
	if err := s.ctr.Start(ctx); err != nil {
		return fmt.Errorf("start %s container %s again: %w%s", s.kind, shortID(s.ctr.GetContainerID()), err, logTail(s.ctr))
	}
	return s.refreshEndpoints(ctx)
}

// Restart stops then starts the same container, waiting until the server is
// healthy.
func (s *server) Restart(ctx context.Context) error {
	if err := s.Stop(ctx); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Terminate stops and removes the container. Calling it again is a no-op,
// and so is terminating a container already removed by someone else (a
// test that removed it on purpose, Sweep, `docker rm`): the goal, no
// container left, is met.
func (s *server) Terminate(ctx context.Context) error {
	s.mu.Lock()
	if s.terminated {
		s.mu.Unlock()
		return nil
	}
	s.terminated = true
	s.mu.Unlock()
	if err := withoutNotFound(s.ctr.Terminate(ctx)); err != nil {
		return fmt.Errorf("terminate %s container %s: %w", s.kind, shortID(s.ctr.GetContainerID()), err)
	}
	return nil
}

// withoutNotFound drops the engine's "no such container" errors from err,
// keeping any other: testcontainers joins the errors of the steps of a
// termination, and only a missing container is expected.
func withoutNotFound(err error) error {
	if err == nil {
		return nil
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var keep []error
		for _, e := range joined.Unwrap() {
			if e = withoutNotFound(e); e != nil {
				keep = append(keep, e)
			}
		}
		return errors.Join(keep...)
	}
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// logTail formats the end of a container's logs for an error message, so a
// failed start says what the server printed before it died.
func logTail(ctr testcontainers.Container) string {
	if ctr == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("\n(container logs unavailable: %v)", err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if len(strings.TrimSpace(string(b))) == 0 {
		return "\n(container printed no logs)"
	}
	return "\n--- last container log lines ---\n" + tail(string(b), 40)
}

// freePort asks the kernel for a free loopback port. Another process may take
// it before the container binds it; startServer retries on that conflict.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

func isPortConflict(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "port is already allocated") || strings.Contains(msg, "address already in use")
}
