package distributed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	etcdtls "go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/engine"
)

// WorkerBinaryEnv names the environment variable that overrides the
// binary local mode spawns as `BIN worker ...`; by default it is this
// program (os.Executable), which is right for the mocker binary and wrong
// for a test binary.
const WorkerBinaryEnv = "MOCKER_WORKER_BIN"

// localStartWait bounds how long local mode waits for its children to
// register.
const localStartWait = 60 * time.Second

// localServices is what local mode started: etcd, NATS and the workers.
type localServices struct {
	dir     string
	etcd    *embed.Etcd
	etcdURL string
	nats    *natsserver.Server
	natsURL string
	// natsAuth and etcdAuth are the run's random credentials, when the
	// services require them; the children get them in their environment.
	natsAuth cluster.NATSAuth
	etcdAuth cluster.EtcdAuth
	// reaper removes dir if this process dies without doing it (local
	// mode only).
	reaper   *reaper
	mu       sync.Mutex
	children []*child
}

// child is one spawned `mocker worker`.
type child struct {
	name   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	done   chan struct{}
	err    error
}

// startLocal starts an embedded etcd and NATS server, attaches to them and
// spawns the cluster's pools as child worker processes.
func startLocal(cfg cluster.Config, host *cluster.RemoteHost, log *slog.Logger) (cluster.Transport, error) {
	// Loopback is open to every user of the host: the services want the
	// run's own credentials.
	ls, err := startServices(true)
	if err != nil {
		return nil, err
	}
	ns := cfg.Transport.NamespaceOrDefault()
	t, err := attach(host, ls.transport(ns), log)
	if err != nil {
		return nil, errors.Join(err, ls.close())
	}
	t.local = ls
	t.name = "local"
	bin := os.Getenv(WorkerBinaryEnv)
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("transport local: finding this program to spawn workers: %w", err)
		}
	}
	// A SIGKILL leaves no time to remove the etcd data: a process of its
	// own waits for this one to end and removes it then.
	if ls.reaper, err = startReaper(bin, ls.dir); err != nil {
		_ = t.Close()
		return nil, err
	}
	seq := uint64(0)
	for _, p := range host.Pools() {
		argsJSON, err := json.Marshal(p.Args)
		if err != nil {
			_ = t.Close()
			return nil, err
		}
		for i := range p.Workers {
			name := fmt.Sprintf("%s-%d", poolName(p.Role), i)
			seq++
			argv := []string{"worker", "--name", name, "--role", string(p.Role), "--engine", cfg.Engine, "--namespace", ns,
				"--etcd", ls.etcdURL, "--nats", ls.natsURL, "--args", string(argsJSON),
				"--listen-host", cfg.TransferHost, "--seed", strconv.FormatUint(cfg.Seed^seq*0x9e3779b97f4a7c15, 10),
				// The embedded NATS takes only this run's random
				// credentials: no Dynamo tool can read an event plane.
				"--no-event-plane"}
			if cfg.AdvertisedHost != "" {
				argv = append(argv, "--advertise-host", cfg.AdvertisedHost)
			}
			if err := ls.spawn(bin, name, argv); err != nil {
				_ = t.Close()
				return nil, err
			}
		}
	}
	err = t.await(localStartWait, func(n map[engine.WorkerType]int) bool {
		for _, p := range host.Pools() {
			if n[p.Role] < p.Workers {
				return false
			}
		}
		return true
	}, ls.exited)
	if err != nil {
		_ = t.Close()
		return nil, err
	}
	return t, nil
}

func poolName(r engine.WorkerType) string {
	if r == engine.WorkerAggregated {
		return "worker"
	}
	return string(r)
}

func freeURL(scheme string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	_ = l.Close()
	return scheme + "://" + addr, nil
}

// transport is how a router reaches the services.
func (ls *localServices) transport(ns string) *cluster.TransportConfig {
	return &cluster.TransportConfig{Etcd: []string{ls.etcdURL}, NATS: ls.natsURL, Namespace: ns, NATSAuth: ls.natsAuth, EtcdAuth: ls.etcdAuth}
}

// secretToken is a random credential.
func secretToken() cluster.Secret { return cluster.Secret(fmt.Sprintf("%x", plane.NewMACKey())) }

// startServices starts the embedded etcd and NATS; secure has both
// require a user and password made up for this run.
func startServices(secure bool) (*localServices, error) { return startServicesTLS(secure, nil) }

// serverTLS are the PEM files of services that speak TLS only and verify
// their clients' certificates: the CA, the servers' pair and the pair
// their clients present.
type serverTLS struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// startServicesTLS is startServices, with TLS on both services when tf is
// set.
func startServicesTLS(secure bool, tf *serverTLS) (*localServices, error) {
	ls := &localServices{}
	scheme := "http"
	if tf != nil {
		scheme = "https"
		client := cluster.TLSFiles{CA: tf.CA, Cert: tf.ClientCert, Key: tf.ClientKey}
		ls.natsAuth.TLS, ls.etcdAuth.TLS = client, client
	}
	if secure {
		ls.natsAuth.User, ls.natsAuth.Password = "mocker", secretToken()
		ls.etcdAuth.Username, ls.etcdAuth.Password = "root", secretToken()
	}
	var err error
	removeStaleEtcdDirs(os.TempDir())
	if ls.dir, err = os.MkdirTemp("", fmt.Sprintf("%s%d-", etcdDirPrefix, os.Getpid())); err != nil {
		return nil, fmt.Errorf("transport local: %w", err)
	}
	clientURL, err := freeURL(scheme)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("transport local: %w", err), ls.close())
	}
	peerURL, err := freeURL("http")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("transport local: %w", err), ls.close())
	}
	cu, _ := url.Parse(clientURL)
	pu, _ := url.Parse(peerURL)
	ec := embed.NewConfig()
	ec.Name = "mocker-local"
	ec.Dir = ls.dir
	// Its shutdown logs errors that are only the listeners closing.
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	ec.ListenClientUrls = []url.URL{*cu}
	ec.AdvertiseClientUrls = []url.URL{*cu}
	if tf != nil {
		ec.ClientTLSInfo = etcdtls.TLSInfo{CertFile: tf.ServerCert, KeyFile: tf.ServerKey, TrustedCAFile: tf.CA, ClientCertAuth: true}
	}
	ec.ListenPeerUrls = []url.URL{*pu}
	ec.AdvertisePeerUrls = []url.URL{*pu}
	ec.InitialCluster = ec.Name + "=" + peerURL
	// bcrypt's cost guards guessable passwords; the run's is 256 random
	// bits, and every client's login pays the cost.
	ec.BcryptCost = 4
	if ls.etcd, err = embed.StartEtcd(ec); err != nil {
		return nil, errors.Join(fmt.Errorf("transport local: embedded etcd: %w", err), ls.close())
	}
	select {
	case <-ls.etcd.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		return nil, errors.Join(errors.New("transport local: embedded etcd not ready after 30s"), ls.close())
	}
	ls.etcdURL = clientURL
	if secure {
		if err := enableEtcdAuth(clientURL, ls.etcdAuth); err != nil {
			return nil, errors.Join(fmt.Errorf("transport local: embedded etcd: %w", err), ls.close())
		}
	}
	opts := &natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true,
		MaxPayload: 8 << 20, Username: ls.natsAuth.User, Password: ls.natsAuth.Password.Reveal()}
	if tf != nil {
		opts.TLSConfig, err = natsserver.GenTLSConfig(&natsserver.TLSConfigOpts{CertFile: tf.ServerCert, KeyFile: tf.ServerKey, CaFile: tf.CA, Verify: true})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("transport local: embedded NATS TLS: %w", err), ls.close())
		}
		opts.TLS, opts.TLSVerify = true, true
	}
	ls.nats, err = natsserver.NewServer(opts)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("transport local: embedded NATS: %w", err), ls.close())
	}
	go ls.nats.Start()
	if !ls.nats.ReadyForConnections(10 * time.Second) {
		return nil, errors.Join(errors.New("transport local: embedded NATS not ready after 10s"), ls.close())
	}
	ls.natsURL = ls.nats.ClientURL()
	return ls, nil
}

func (ls *localServices) spawn(bin, name string, argv []string) error {
	cmd := exec.Command(bin, argv...)
	// The credentials go in the environment, which only this user can
	// read (/proc/PID/environ), never on the command line.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "MOCKER_NATS_") || strings.HasPrefix(kv, "MOCKER_ETCD_")
	})
	if ls.natsAuth.User != "" {
		cmd.Env = append(cmd.Env, cluster.EnvNATSUser+"="+ls.natsAuth.User, cluster.EnvNATSPassword+"="+ls.natsAuth.Password.Reveal())
	}
	if ls.etcdAuth.Username != "" {
		cmd.Env = append(cmd.Env, cluster.EnvEtcdUsername+"="+ls.etcdAuth.Username, cluster.EnvEtcdPassword+"="+ls.etcdAuth.Password.Reveal())
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		// A worker's loop is one goroutine, and the rest of it waits on
		// sockets: a second P only spins looking for work, which costs a
		// local worker about a sixth of its CPU (docs/scale.md).
		cmd.Env = append(cmd.Env, "GOMAXPROCS=1")
	}
	ch := &child{name: name, cmd: cmd, stderr: &tailBuffer{max: 8 << 10}, done: make(chan struct{})}
	cmd.Stdout = ch.stderr
	cmd.Stderr = ch.stderr
	setChildAttrs(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("transport local: starting worker %s (%s): %w", name, bin, err)
	}
	go func() {
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	ls.mu.Lock()
	ls.children = append(ls.children, ch)
	ls.mu.Unlock()
	return nil
}

// exited reports a child that ended while the cluster waits for it.
func (ls *localServices) exited() error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, ch := range ls.children {
		select {
		case <-ch.done:
			err := ch.err
			if err == nil {
				err = errors.New("exit status 0")
			}
			return fmt.Errorf("transport local: worker %s exited (%w): %s", ch.name, err, bytes.TrimSpace(ch.stderr.Bytes()))
		default:
		}
	}
	return nil
}

// Children lists the spawned workers' names and process ids.
func (ls *localServices) pids() map[string]int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := map[string]int{}
	for _, ch := range ls.children {
		out[ch.name] = ch.cmd.Process.Pid
	}
	return out
}

// close stops the workers (SIGTERM: they drain and revoke their leases),
// then NATS and etcd.
func (ls *localServices) close() error {
	ls.mu.Lock()
	children := ls.children
	ls.children = nil
	ls.mu.Unlock()
	for _, ch := range children {
		_ = ch.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, ch := range children {
		select {
		case <-ch.done:
		case <-time.After(15 * time.Second):
			_ = ch.cmd.Process.Kill()
			<-ch.done
		}
	}
	if ls.nats != nil {
		ls.nats.Shutdown()
		ls.nats.WaitForShutdown()
	}
	if ls.etcd != nil {
		ls.etcd.Close()
	}
	var err error
	if ls.dir != "" {
		err = os.RemoveAll(ls.dir)
	}
	if ls.reaper != nil {
		err = errors.Join(err, ls.reaper.stop())
	}
	return err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}

// enableEtcdAuth makes the embedded etcd require auth's user (its root)
// and password.
func enableEtcdAuth(url string, auth cluster.EtcdAuth) error {
	tc, err := plane.TLSConfig("etcd", auth.TLS)
	if err != nil {
		return err
	}
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: plane.DialTimeout, Logger: zap.NewNop(), TLS: tc})
	if err != nil {
		return err
	}
	defer ec.Close()
	ctx, cancel := context.WithTimeout(context.Background(), plane.DialTimeout)
	defer cancel()
	if _, err := ec.UserAdd(ctx, auth.Username, auth.Password.Reveal()); err != nil {
		return fmt.Errorf("adding its user: %w", err)
	}
	if _, err := ec.UserGrantRole(ctx, auth.Username, "root"); err != nil {
		return fmt.Errorf("granting its user root: %w", err)
	}
	if _, err := ec.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enabling auth: %w", err)
	}
	return nil
}

// etcdDirPrefix names the embedded etcd's data directories in the temp
// directory: mocker-etcd-pid{PID}-{random}, PID the process that runs it.
const etcdDirPrefix = "mocker-etcd-pid"

// removeStaleEtcdDirs removes the embedded etcd data a killed run left
// (SIGKILL leaves no time to clean up): the directories in dir whose
// process is gone.
func removeStaleEtcdDirs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), etcdDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}
