package plane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kvstrand/mocker/cluster"
)

// DialTimeout bounds how long a worker or a router waits for etcd or NATS
// before it gives up, naming the URL.
const DialTimeout = 5 * time.Second

// natsAuthFromEnv fills a's empty user, password and token from the
// environment, unless a names another way in (creds or nkey).
func natsAuthFromEnv(a cluster.NATSAuth) cluster.NATSAuth {
	if a.Creds != "" || a.NKey != "" {
		return a
	}
	if a.User == "" && a.Token == "" {
		a.User = os.Getenv(cluster.EnvNATSUser)
	}
	if a.User != "" && a.Password == "" {
		a.Password = cluster.Secret(os.Getenv(cluster.EnvNATSPassword))
	}
	if a.User == "" && a.Token == "" {
		a.Token = cluster.Secret(os.Getenv(cluster.EnvNATSToken))
	}
	return a
}

// etcdAuthFromEnv fills a's empty username and password from the
// environment.
func etcdAuthFromEnv(a cluster.EtcdAuth) cluster.EtcdAuth {
	if a.Username == "" {
		a.Username = os.Getenv(cluster.EnvEtcdUsername)
	}
	if a.Username != "" && a.Password == "" {
		a.Password = cluster.Secret(os.Getenv(cluster.EnvEtcdPassword))
	}
	return a
}

// TLSConfig is the client TLS of f; nil when f names no file.
func TLSConfig(what string, f cluster.TLSFiles) (*tls.Config, error) {
	if !f.Set() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("%s tls.ca: %w", what, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s tls.ca: %s holds no PEM certificate", what, f.CA)
		}
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%s tls.cert, tls.key: %w", what, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// RedactedURLs joins endpoints for a message, passwords hidden.
func RedactedURLs(endpoints []string) string {
	redacted := make([]string, len(endpoints))
	for i, e := range endpoints {
		redacted[i] = cluster.RedactURL(e)
	}
	return strings.Join(redacted, ",")
}

func DialEtcd(ctx context.Context, endpoints []string, auth cluster.EtcdAuth) (*clientv3.Client, error) {
	urls := RedactedURLs(endpoints)
	auth = etcdAuthFromEnv(auth)
	tc, err := TLSConfig("etcd", auth.TLS)
	if err != nil {
		return nil, err
	}
	ec, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: DialTimeout, Logger: zap.NewNop(),
		Username: auth.Username, Password: auth.Password.Reveal(), TLS: tc})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", urls, err)
	}
	// The client connects lazily: ask for something to know it is there.
	sctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if _, err := ec.Get(sctx, "v1/mocker/"); err != nil {
		_ = ec.Close()
		return nil, fmt.Errorf("etcd %s unreachable: %w", urls, err)
	}
	return ec, nil
}

// ReconnectBufSize is how much a NATS connection buffers while it
// reconnects; nats.go publishes it once the connection is back (what
// the peer was not yet resubscribed for is lost all the same). The
// package's tests set it to -1 (no buffer: whatever is published during
// an outage is lost) so an outage surely loses messages.
var ReconnectBufSize = 64 << 20

func DialNATS(url, name string, auth cluster.NATSAuth, opts ...nats.Option) (*nats.Conn, error) {
	auth = natsAuthFromEnv(auth)
	base := []nats.Option{nats.Name(name), nats.Timeout(DialTimeout), nats.MaxReconnects(-1),
		nats.ReconnectBufSize(ReconnectBufSize)}
	switch {
	case auth.User != "":
		base = append(base, nats.UserInfo(auth.User, auth.Password.Reveal()))
	case auth.Token != "":
		base = append(base, nats.Token(auth.Token.Reveal()))
	case auth.Creds != "":
		base = append(base, nats.UserCredentials(auth.Creds))
	case auth.NKey != "":
		o, err := nats.NkeyOptionFromSeed(auth.NKey)
		if err != nil {
			return nil, fmt.Errorf("nats nkey %s: %w", auth.NKey, err)
		}
		base = append(base, o)
	}
	tc, err := TLSConfig("nats", auth.TLS)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		base = append(base, nats.Secure(tc))
	}
	nc, err := nats.Connect(url, append(base, opts...)...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) || strings.Contains(err.Error(), "Authorization Violation") {
			return nil, fmt.Errorf("nats %s: the server refused this client's credentials (check user and password, token, creds or nkey): %w",
				cluster.RedactURL(url), nats.ErrAuthorization)
		}
		return nil, fmt.Errorf("nats %s unreachable: %w", cluster.RedactURL(url), err)
	}
	return nc, nil
}
