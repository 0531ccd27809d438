package containers

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go/wait"
)

// etcd's client port inside the container.
const etcdClientPort = "2379/tcp"

const (
	etcdModule          = "go.etcd.io/etcd/server/v3"
	etcdFallbackVersion = "v3.7.3" // used only when go list cannot answer
	etcdLocalRepo       = "mocker-local/etcd"
	etcdOfficialRepo    = "gcr.io/etcd-development/etcd"
	etcdBinary          = "/usr/local/bin/etcd" // where the official image keeps it
)

// Etcd is a single-member etcd server in a container.
type Etcd struct {
	*server
	network []string
	scheme  string // "http://", or "https://" with [WithSecure]
}

// StartEtcd starts etcd and waits until its /health endpoint reports healthy.
// The client port is bound to a fixed loopback port, so [Etcd.Endpoints] stay
// valid across [Etcd.Restart] and clients can reconnect. Data lives in the
// container's own filesystem: it survives Restart, not Terminate.
func StartEtcd(ctx context.Context, opts ...Option) (*Etcd, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	spec := etcdSpec(ctx)
	scheme := "http://"
	if sec := o.secure; sec != nil {
		scheme = "https://"
		spec.files = sec.files
		plain := spec.cmd
		spec.cmd = func(hp map[string]string) []string {
			var out []string
			for _, a := range plain(hp) {
				switch {
				case strings.HasPrefix(a, "--listen-client-urls="), strings.HasPrefix(a, "--advertise-client-urls="):
					a = strings.Replace(a, "http://", "https://", 1)
				}
				out = append(out, a)
			}
			// bcrypt's lowest cost: a test store, where checking a
			// password must not take a loaded host's CPU for seconds.
			return append(out, "--cert-file="+secureCertPath, "--key-file="+secureKeyPath, "--bcrypt-cost=4")
		}
		plainWait := spec.wait
		spec.wait = func(timeout time.Duration) wait.Strategy {
			return plainWait(timeout).(*wait.HTTPStrategy).WithTLS(true, sec.clientTLS())
		}
	}
	s, err := startServer(ctx, spec, o)
	if err != nil {
		return nil, err
	}
	e := &Etcd{server: s, scheme: scheme}
	for _, a := range o.aliases {
		e.network = append(e.network, scheme+a+":2379")
	}
	if o.secure != nil {
		if err := enableEtcdAuth(ctx, e.Endpoints(), o.secure); err != nil {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			return nil, errors.Join(err, e.Terminate(tctx))
		}
	}
	return e, nil
}

func etcdSpec(ctx context.Context) serverSpec {
	version := lookupVersion(ctx, etcdModule, etcdFallbackVersion)
	official := etcdOfficialRepo + ":" + version
	if v := envOr(EnvEtcdImage, ""); v != "" {
		official = v
	}
	return serverSpec{
		kind: "etcd",
		image: serverImage{
			official: official,
			local: ImageSpec{
				Tag:          etcdLocalRepo + ":" + version,
				Package:      "github.com/kvstrand/mocker/containers/images/etcd",
				BinaryPath:   etcdBinary,
				ExposedPorts: []string{"2379/tcp", "2380/tcp"},
				Labels:       map[string]string{LabelOwner + ".module": etcdModule + "@" + version},
				Reuse:        true,
			},
		},
		entrypoint: []string{etcdBinary},
		cmd: func(hostPorts map[string]string) []string {
			advertise := "http://127.0.0.1:2379"
			if hp := hostPorts[etcdClientPort]; hp != "" {
				advertise = "http://127.0.0.1:" + hp
			}
			return []string{
				"--name=mocker",
				"--data-dir=/var/lib/etcd/mocker",
				"--listen-client-urls=http://0.0.0.0:2379",
				"--advertise-client-urls=" + advertise,
				"--listen-peer-urls=http://127.0.0.1:2380",
				"--initial-advertise-peer-urls=http://127.0.0.1:2380",
				"--initial-cluster=mocker=http://127.0.0.1:2380",
				// A test store: losing the last writes on a host crash is
				// fine, and skipping fsync keeps writes fast on overlay disks.
				"--unsafe-no-fsync",
			}
		},
		ports: []string{etcdClientPort},
		wait: func(timeout time.Duration) wait.Strategy {
			return wait.ForHTTP("/health").
				WithPort(etcdClientPort).
				WithForcedIPv4LocalHost().
				WithPollInterval(100 * time.Millisecond).
				WithStartupTimeout(timeout).
				WithResponseMatcher(func(body io.Reader) bool {
					b, _ := io.ReadAll(body)
					return strings.Contains(string(b), `"health":"true"`)
				})
		},
	}
}

// Endpoints are the client URLs reachable from this machine, e.g.
// http://127.0.0.1:32771. On a local engine they do not change on Restart;
// on a remote engine, read them again after Restart.
func (e *Etcd) Endpoints() []string {
	return []string{e.scheme + e.addr(etcdClientPort)}
}

// NetworkEndpoints are the client URLs other containers on the network given
// to [WithNetwork] use; nil without one.
func (e *Etcd) NetworkEndpoints() []string { return e.network }
