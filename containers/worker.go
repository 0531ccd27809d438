package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Network is a user-defined Docker bridge network this package created.
// Containers on it reach each other by alias, and workers get fixed
// addresses on it (see [WorkerSpec.DataNetwork]) so that an address they
// advertise stays right after a partition heals.
type Network struct {
	ID, Name string

	mu     sync.Mutex
	subnet netip.Prefix
	next   netip.Addr
}

// Fixed worker addresses start at firstFixedHost in a network's subnet;
// the engine hands out dynamic addresses (etcd, NATS, anything else that
// joins) from dynamicRangeBits, the subnet's first /25, below them.
const (
	firstFixedHost   = 200
	dynamicRangeBits = 25
)

// NewNetwork creates a bridge network labelled as this process's, with a
// subnet configured explicitly: the engine accepts a fixed container
// address only on such a network. The subnet is the one the engine picks
// for a default network, so it does not clash with the engine's others.
func NewNetwork(ctx context.Context) (*Network, error) {
	e, err := getEngine(ctx)
	if err != nil {
		return nil, err
	}
	probe, err := tcnetwork.New(ctx, tcnetwork.WithLabels(ownerLabels()))
	if err != nil {
		return nil, fmt.Errorf("create docker network: %w", err)
	}
	res, err := e.cli.NetworkInspect(ctx, probe.ID, client.NetworkInspectOptions{})
	rmErr := probe.Remove(context.WithoutCancel(ctx))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("inspect network %s: %w", probe.Name, err), rmErr)
	}
	if rmErr != nil {
		return nil, fmt.Errorf("remove probe network %s: %w", probe.Name, rmErr)
	}
	var subnet netip.Prefix
	for _, c := range res.Network.IPAM.Config {
		if c.Subnet.IsValid() && c.Subnet.Addr().Is4() && c.Subnet.Bits() <= 24 {
			subnet = c.Subnet.Masked()
			break
		}
	}
	if !subnet.IsValid() {
		return nil, fmt.Errorf("network %s: the engine gave no IPv4 subnet of /24 or larger to place workers in", probe.Name)
	}
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(ownerLabels()), tcnetwork.WithIPAM(&network.IPAM{
		Driver: "default",
		Config: []network.IPAMConfig{{Subnet: subnet, IPRange: netip.PrefixFrom(subnet.Addr(), dynamicRangeBits)}},
	}))
	if err != nil {
		return nil, fmt.Errorf("create docker network on %s: %w", subnet, err)
	}
	n := &Network{ID: nw.ID, Name: nw.Name, subnet: subnet}
	a := subnet.Addr()
	for range firstFixedHost {
		a = a.Next()
	}
	n.next = a
	return n, nil
}

// allocate returns the next fixed address on the network.
func (n *Network) allocate() (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.next
	if !n.subnet.Contains(a.Next()) {
		return netip.Addr{}, fmt.Errorf("network %s: no fixed address left in %s", n.Name, n.subnet)
	}
	n.next = a.Next()
	return a, nil
}

// Remove deletes the network; every container must have left it.
func (n *Network) Remove(ctx context.Context) error {
	e, err := getEngine(ctx)
	if err != nil {
		return err
	}
	if _, err := e.cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !isNotFound(err) {
		return fmt.Errorf("remove network %s: %w", n.Name, err)
	}
	return nil
}

// WorkerSpec is one `mocker worker` container.
type WorkerSpec struct {
	// Image is the worker image; default [BuildWorkerImage]'s.
	Image string
	// Name is the worker's name in results and its host name on Network.
	Name string
	// Role is prefill, decode or aggregated; Engine vllm, sglang or trtllm.
	Role, Engine string
	// Namespace scopes its etcd keys and NATS subjects.
	Namespace string
	// Etcd and NATS are the servers as containers on Network reach them
	// ([Etcd.NetworkEndpoints], [NATS.NetworkURL]).
	Etcd []string
	NATS string
	// Args are engine arguments (Dynamo's MockEngineArgs keys).
	Args map[string]any
	// Network carries discovery, requests and events.
	Network *Network
	// DataNetwork carries KV transfers: the worker gets a fixed address
	// on it and advertises that address to decode workers, so a test can
	// cut transfers ([Worker.Partition]) while etcd and NATS still reach
	// the worker. Nil: Network, with a fixed address there.
	DataNetwork *Network
	// Flags are more `mocker worker` flags (e.g. "--log-level", "debug").
	Flags []string
	// Env is the worker's environment: where it reads secrets
	// (MOCKER_NATS_PASSWORD, MOCKER_ETCD_PASSWORD and the like), which
	// must stay off its command line.
	Env map[string]string
	// Files are copied into the container before it starts, by path (a
	// CA certificate its flags name, say).
	Files map[string][]byte
}

// Worker is a running `mocker worker` container.
type Worker struct {
	Name string
	ctr  testcontainers.Container
	data *Network
	ip   netip.Addr

	mu         sync.Mutex
	terminated bool
}

// workerReadyTimeout bounds the wait for a worker to register: it dials
// etcd and NATS with its own 5 s timeouts, so more than that means it
// failed.
const workerReadyTimeout = 30 * time.Second

// StartWorker starts a worker container and waits until it has registered
// in etcd (its log says "worker registered").
func StartWorker(ctx context.Context, spec WorkerSpec) (*Worker, error) {
	if spec.Name == "" || spec.Role == "" || spec.Network == nil || len(spec.Etcd) == 0 || spec.NATS == "" {
		return nil, fmt.Errorf("worker spec %q: Name, Role, Network, Etcd and NATS are required", spec.Name)
	}
	if spec.Image == "" {
		ref, err := BuildWorkerImage(ctx)
		if err != nil {
			return nil, err
		}
		spec.Image = ref
	}
	data := spec.DataNetwork
	if data == nil {
		data = spec.Network
	}
	ip, err := data.allocate()
	if err != nil {
		return nil, err
	}
	args := []byte("{}")
	if spec.Args != nil {
		if args, err = json.Marshal(spec.Args); err != nil {
			return nil, fmt.Errorf("worker %s: args: %w", spec.Name, err)
		}
	}
	cmd := []string{"worker", "--name", spec.Name, "--role", spec.Role, "--etcd", strings.Join(spec.Etcd, ","),
		"--nats", spec.NATS, "--args", string(args), "--listen-host", "0.0.0.0", "--advertise-host", ip.String()}
	if spec.Engine != "" {
		cmd = append(cmd, "--engine", spec.Engine)
	}
	if spec.Namespace != "" {
		cmd = append(cmd, "--namespace", spec.Namespace)
	}
	cmd = append(cmd, spec.Flags...)
	labels := ownerLabels()
	labels[LabelOwner+".kind"] = "worker"
	// The data network comes first: testcontainers creates the container
	// on the first network, where the endpoint settings (the fixed
	// address) apply, and connects the others after.
	networks := []string{data.Name}
	if data != spec.Network {
		networks = append(networks, spec.Network.Name)
	}
	var files []testcontainers.ContainerFile
	for path, b := range spec.Files {
		files = append(files, testcontainers.ContainerFile{Reader: bytes.NewReader(b), ContainerFilePath: path, FileMode: 0o644})
	}
	req := testcontainers.ContainerRequest{
		Image:          spec.Image,
		Cmd:            cmd,
		Env:            spec.Env,
		Files:          files,
		Labels:         labels,
		Networks:       networks,
		NetworkAliases: map[string][]string{spec.Network.Name: {spec.Name}},
		WaitingFor:     wait.ForLog("worker registered").WithStartupTimeout(workerReadyTimeout),
		EndpointSettingsModifier: func(eps map[string]*network.EndpointSettings) {
			if ep := eps[data.Name]; ep != nil {
				ep.IPAMConfig = &network.EndpointIPAMConfig{IPv4Address: ip}
			}
		},
	}
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req, Started: true, Logger: tcLogger{},
	})
	if err != nil {
		err = fmt.Errorf("start worker %s (image %s): %w%s", spec.Name, spec.Image, err, logTail(ctr))
		if ctr != nil {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			err = errors.Join(err, withoutNotFound(ctr.Terminate(tctx)))
		}
		return nil, err
	}
	return &Worker{Name: spec.Name, ctr: ctr, data: data, ip: ip}, nil
}

// StartWorkers starts the workers in parallel. On error the ones that
// started are terminated.
func StartWorkers(ctx context.Context, specs ...WorkerSpec) ([]*Worker, error) {
	out := make([]*Worker, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() { out[i], errs[i] = StartWorker(ctx, s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, w := range out {
			if w != nil {
				err = errors.Join(err, w.Terminate(context.WithoutCancel(ctx)))
			}
		}
		return nil, err
	}
	return out, nil
}

// ContainerID identifies the container to the Docker engine.
func (w *Worker) ContainerID() string { return w.ctr.GetContainerID() }

// Kill sends SIGKILL: the worker dies without draining or revoking its
// lease, as a crashed host would, so its registration lingers until the
// lease expires.
func (w *Worker) Kill(ctx context.Context) error {
	return w.docker(ctx, "kill worker "+w.Name, func(e *engine) error {
		_, err := e.cli.ContainerKill(ctx, w.ContainerID(), client.ContainerKillOptions{Signal: "KILL"})
		return err
	})
}

// docker runs op against the Docker engine; a failure says what was
// being done.
func (w *Worker) docker(ctx context.Context, what string, op func(*engine) error) error {
	e, err := getEngine(ctx)
	if err != nil {
		return err
	}
	if err := op(e); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Pause freezes the worker's process (cgroup freezer): it keeps its
// connections but answers nothing and stops renewing its etcd lease.
func (w *Worker) Pause(ctx context.Context) error {
	return w.docker(ctx, "pause worker "+w.Name, func(e *engine) error {
		_, err := e.cli.ContainerPause(ctx, w.ContainerID(), client.ContainerPauseOptions{})
		return err
	})
}

// Unpause resumes a paused worker.
func (w *Worker) Unpause(ctx context.Context) error {
	return w.docker(ctx, "unpause worker "+w.Name, func(e *engine) error {
		_, err := e.cli.ContainerUnpause(ctx, w.ContainerID(), client.ContainerUnpauseOptions{})
		return err
	})
}

// Partition disconnects the worker from its data network: transfers to
// and from it fail while etcd and NATS still reach it (when the data
// network is not its only one).
func (w *Worker) Partition(ctx context.Context) error {
	return w.docker(ctx, fmt.Sprintf("disconnect worker %s from %s", w.Name, w.data.Name), func(e *engine) error {
		_, err := e.cli.NetworkDisconnect(ctx, w.data.ID, client.NetworkDisconnectOptions{Container: w.ContainerID(), Force: true})
		return err
	})
}

// Heal reconnects the worker to its data network at the address it
// advertises.
func (w *Worker) Heal(ctx context.Context) error {
	return w.docker(ctx, fmt.Sprintf("reconnect worker %s to %s at %s", w.Name, w.data.Name, w.ip), func(e *engine) error {
		_, err := e.cli.NetworkConnect(ctx, w.data.ID, client.NetworkConnectOptions{
			Container:      w.ContainerID(),
			EndpointConfig: &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: w.ip}},
		})
		return err
	})
}

// Logs returns what the worker has printed (its slog lines).
func (w *Worker) Logs(ctx context.Context) (string, error) {
	rc, err := w.ctr.Logs(ctx)
	if err != nil {
		return "", fmt.Errorf("worker %s logs: %w", w.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// Terminate stops (SIGTERM, so the worker drains and revokes its lease)
// and removes the container. Calling it again, or on a container already
// gone, is a no-op.
func (w *Worker) Terminate(ctx context.Context) error {
	w.mu.Lock()
	if w.terminated {
		w.mu.Unlock()
		return nil
	}
	w.terminated = true
	w.mu.Unlock()
	if err := withoutNotFound(w.ctr.Terminate(ctx, testcontainers.StopTimeout(15*time.Second))); err != nil {
		return fmt.Errorf("terminate worker %s: %w", w.Name, err)
	}
	return nil
}

func isNotFound(err error) bool { return withoutNotFound(err) == nil }
