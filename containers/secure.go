package containers

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Secure makes a server require TLS and a password, as a locked-down
// deployment runs it: clients must trust CA, and present User and
// Password.
type Secure struct {
	// CA signs Cert; clients verify the server with it (PEM).
	CA []byte
	// Cert and Key are the server's certificate and key (PEM). The
	// certificate must name the hosts clients use: the network alias
	// other containers dial and 127.0.0.1 for this machine.
	Cert, Key []byte
	// User and Password are what clients must present. For etcd, User is
	// granted read and write on the keys mocker uses (the prefix "v1/")
	// and nothing else; the root user gets a random password no client
	// is told.
	User, Password string
}

func (s *Secure) validate() error {
	if len(s.CA) == 0 || len(s.Cert) == 0 || len(s.Key) == 0 || s.User == "" || s.Password == "" {
		return errors.New("containers: Secure needs CA, Cert, Key, User and Password")
	}
	if _, err := tls.X509KeyPair(s.Cert, s.Key); err != nil {
		return fmt.Errorf("containers: Secure: certificate and key: %w", err)
	}
	return nil
}

// clientTLS trusts the server's CA.
func (s *Secure) clientTLS() *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CA)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// Paths of the server's TLS files inside its container.
const (
	secureCertPath = "/mocker-tls/server.pem"
	secureKeyPath  = "/mocker-tls/server-key.pem"
)

func (s *Secure) files() []testcontainers.ContainerFile {
	return []testcontainers.ContainerFile{
		{Reader: bytes.NewReader(s.Cert), ContainerFilePath: secureCertPath, FileMode: 0o644},
		{Reader: bytes.NewReader(s.Key), ContainerFilePath: secureKeyPath, FileMode: 0o600},
	}
}

// WithSecure makes the server require TLS and a password (NATS and etcd).
func WithSecure(s Secure) Option {
	return func(o *options) { o.secure = &s }
}

// enableEtcdAuth creates User with read and write on mocker's keys, gives
// root a password no one is told, and turns authentication on.
func enableEtcdAuth(ctx context.Context, endpoints []string, s *Secure) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: s.clientTLS(), DialTimeout: 10 * time.Second, Context: ctx})
	if err != nil {
		return fmt.Errorf("etcd auth: connect: %w", err)
	}
	defer cli.Close()
	rootPass, err := randomHex(32)
	if err != nil {
		return err
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"add root", func() error { _, err := cli.UserAdd(ctx, "root", rootPass); return err }},
		{"grant root", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"add role mocker", func() error { _, err := cli.RoleAdd(ctx, "mocker"); return err }},
		{"grant role mocker v1/", func() error {
			_, err := cli.RoleGrantPermission(ctx, "mocker", "v1/", clientv3.GetPrefixRangeEnd("v1/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"add user " + s.User, func() error { _, err := cli.UserAdd(ctx, s.User, s.Password); return err }},
		{"grant user " + s.User, func() error { _, err := cli.UserGrantRole(ctx, s.User, "mocker"); return err }},
		{"enable auth", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			return fmt.Errorf("etcd auth: %s: %w", st.what, err)
		}
	}
	return nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random password: %w", err)
	}
	return hex.EncodeToString(b), nil
}
