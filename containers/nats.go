package containers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// NATS ports inside the container: clients and HTTP monitoring.
const (
	natsClientPort  = "4222/tcp"
	natsMonitorPort = "8222/tcp"
)

const (
	natsModule          = "github.com/nats-io/nats-server/v2"
	natsFallbackVersion = "v2.15.2" // used only when go list cannot answer
	natsLocalRepo       = "mocker-local/nats"
	natsOfficialRepo    = "nats"
	natsBinary          = "/nats-server" // where the official image keeps it
)

// NATS is a single NATS server in a container.
type NATS struct {
	*server
	network string
	scheme  string // "nats://", or "tls://" when it requires TLS
}

// StartNATS starts nats-server with monitoring on and waits until /healthz
// answers. Its client port is bound to a fixed loopback port, so [NATS.URL]
// stays valid across [NATS.Restart] and nats.go reconnects on its own.
func StartNATS(ctx context.Context, opts ...Option) (*NATS, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	spec := natsSpec(ctx)
	scheme := "nats://"
	if sec := o.secure; sec != nil {
		scheme = "tls://"
		conf := fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n}\nauthorization {\n  user: %q\n  password: %q\n}\n",
			secureCertPath, secureKeyPath, sec.User, sec.Password)
		spec.files = func() []testcontainers.ContainerFile {
			return append(sec.files(), testcontainers.ContainerFile{Reader: strings.NewReader(conf), ContainerFilePath: natsConfPath, FileMode: 0o600})
		}
		plain := spec.cmd
		spec.cmd = func(hp map[string]string) []string { return append(plain(hp), "--config="+natsConfPath) }
	}
	s, err := startServer(ctx, spec, o)
	if err != nil {
		return nil, err
	}
	n := &NATS{server: s, scheme: scheme}
	if len(o.aliases) > 0 {
		n.network = scheme + o.aliases[0] + ":4222"
	}
	return n, nil
}

// natsConfPath is where a secure server's config file goes.
const natsConfPath = "/mocker-tls/nats.conf"

func natsSpec(ctx context.Context) serverSpec {
	version := lookupVersion(ctx, natsModule, natsFallbackVersion)
	official := natsOfficialRepo + ":" + strings.TrimPrefix(version, "v")
	if v := envOr(EnvNATSImage, ""); v != "" {
		official = v
	}
	return serverSpec{
		kind: "nats",
		image: serverImage{
			official: official,
			local: ImageSpec{
				Tag:          natsLocalRepo + ":" + version,
				Package:      natsModule,
				BinaryPath:   natsBinary,
				ExposedPorts: []string{"4222/tcp", "8222/tcp"},
				Labels:       map[string]string{LabelOwner + ".module": natsModule + "@" + version},
				Reuse:        true,
			},
		},
		entrypoint: []string{natsBinary},
		cmd: func(map[string]string) []string {
			return []string{"--addr=0.0.0.0", "--port=4222", "--http_port=8222"}
		},
		ports: []string{natsClientPort, natsMonitorPort},
		wait: func(timeout time.Duration) wait.Strategy {
			return wait.ForHTTP("/healthz").
				WithPort(natsMonitorPort).
				WithForcedIPv4LocalHost().
				WithPollInterval(100 * time.Millisecond).
				WithStartupTimeout(timeout)
		},
	}
}

// URL is the client URL reachable from this machine, e.g.
// nats://127.0.0.1:32772 (tls://… with [WithSecure]). On a local engine it
// does not change on Restart; on a remote engine, read it again after
// Restart.
func (n *NATS) URL() string { return n.scheme + n.addr(natsClientPort) }

// MonitorURL is the base URL of the HTTP monitoring endpoints (/varz, /connz,
// /healthz).
func (n *NATS) MonitorURL() string { return "http://" + n.addr(natsMonitorPort) }

// NetworkURL is the client URL for other containers on the network given to
// [WithNetwork]; empty without one.
func (n *NATS) NetworkURL() string { return n.network }
