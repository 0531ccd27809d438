package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/containers"
)

// stackAuth is how the secure cell's workers and router reach NATS and
// etcd: a CA made by the test, and a user and password for each server.
type stackAuth struct {
	ca                    []byte
	natsUser, natsPass    string
	etcdUser, etcdPass    string
	caOnce                sync.Once
	caPath                string
	serverCert, serverKey []byte
}

// workerCA is where a worker container finds the CA.
const workerCA = "/mocker-tls/ca.pem"

// worker gives a worker its CA file, flags and secrets (in its
// environment, never on its command line).
func (a *stackAuth) worker(w *containers.WorkerSpec) {
	w.Files = map[string][]byte{workerCA: a.ca}
	w.Flags = append(w.Flags, "--nats-ca", workerCA, "--etcd-ca", workerCA)
	w.Env = map[string]string{
		"MOCKER_NATS_USER": a.natsUser, "MOCKER_NATS_PASSWORD": a.natsPass,
		"MOCKER_ETCD_USERNAME": a.etcdUser, "MOCKER_ETCD_PASSWORD": a.etcdPass,
	}
}

// routerEnv is the router's environment additions: its secrets.
func (a *stackAuth) routerEnv() []string {
	return []string{
		"MOCKER_NATS_USER=" + a.natsUser, "MOCKER_NATS_PASSWORD=" + a.natsPass,
		"MOCKER_ETCD_USERNAME=" + a.etcdUser, "MOCKER_ETCD_PASSWORD=" + a.etcdPass,
	}
}

// caFile writes the CA where the router reads it.
func (a *stackAuth) caFile(t *testing.T) string {
	a.caOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mocker-e2e-ca-")
		require.NoError(t, err)
		a.caPath = filepath.Join(dir, "ca.pem")
		require.NoError(t, os.WriteFile(a.caPath, a.ca, 0o600))
	})
	return a.caPath
}

// newSecureStack is newStack with NATS and etcd requiring TLS (a CA and
// a server certificate made here) and a password each; etcd's user may
// touch mocker's keys only.
func newSecureStack(t *testing.T) *stack {
	t.Helper()
	containers.RequireDocker(t)
	a := newAuth(t)
	s := &stack{image: workerImage(t), secure: a}
	t.Cleanup(func() {
		if a.caPath != "" {
			_ = os.RemoveAll(filepath.Dir(a.caPath))
		}
	})
	s.ctl = newNetwork(t)
	s.data = newNetwork(t)
	sec := containers.Secure{CA: a.ca, Cert: a.serverCert, Key: a.serverKey}
	etcdSec, natsSec := sec, sec
	etcdSec.User, etcdSec.Password = a.etcdUser, a.etcdPass
	natsSec.User, natsSec.Password = a.natsUser, a.natsPass
	s.etcd = containers.EtcdForTest(t, containers.WithNetwork(s.ctl.Name, "etcd"), containers.WithSecure(etcdSec))
	s.nats = containers.NATSForTest(t, containers.WithNetwork(s.ctl.Name, "nats"), containers.WithSecure(natsSec))
	return s
}

// newAuth makes a CA, a server certificate it signs for the names the
// containers and this machine use, and random passwords.
func newAuth(t *testing.T) *stackAuth {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mocker e2e CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "mocker e2e server"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames:    []string{"nats", "etcd", "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	require.NoError(t, err)
	secret := func() string {
		b := make([]byte, 24)
		_, err := rand.Read(b)
		require.NoError(t, err)
		return hex.EncodeToString(b)
	}
	return &stackAuth{
		ca:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		serverCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		serverKey:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		natsUser:   "mocker", natsPass: secret(),
		etcdUser: "mocker", etcdPass: secret(),
	}
}

// TestSecurePlane runs a matrix cell (vLLM, disaggregated, kv router)
// against a NATS and an etcd that both require TLS and a password, with
// the plain cells' thresholds, after checking that a client without the
// credentials is turned away by both.
func TestSecurePlane(t *testing.T) {
	s := newSecureStack(t)
	a := s.secure
	tlsCfg := func() *x509.CertPool {
		p := x509.NewCertPool()
		p.AppendCertsFromPEM(a.ca)
		return p
	}

	t.Run("no credentials, no entry", func(t *testing.T) {
		nc, err := nats.Connect(s.nats.URL(), nats.RootCAs(a.caFile(t)), nats.Timeout(5*time.Second), nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
		}
		require.Error(t, err, "NATS without a password")
		assert.Contains(t, err.Error(), "Authorization")

		nc, err = nats.Connect(s.nats.URL(), nats.UserInfo(a.natsUser, "wrong"), nats.RootCAs(a.caFile(t)), nats.Timeout(5*time.Second), nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
		}
		require.Error(t, err, "NATS with a wrong password")

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cfg := clientv3.Config{Endpoints: s.etcd.Endpoints(), DialTimeout: 5 * time.Second}
		cfg.TLS = etcdTLS(tlsCfg())
		cli, err := clientv3.New(cfg)
		require.NoError(t, err)
		_, err = cli.Put(ctx, "v1/mocker/intruder", "x")
		require.Error(t, err, "etcd without a user")
		_ = cli.Close()

		cfg.Username, cfg.Password = a.etcdUser, a.etcdPass
		cli, err = clientv3.New(cfg)
		require.NoError(t, err)
		defer cli.Close()
		_, err = cli.Put(ctx, "outside/mocker", "x")
		require.Error(t, err, "mocker's etcd user may write mocker's keys only")
	})

	t.Run("cell", func(t *testing.T) {
		ns := "secure-vllm-kv"
		s.startWorkers(t, ns, "vllm", commonArgs(),
			pool{role: "prefill", n: 2, args: map[string]any{"num_gpu_blocks": prefillBlocks}},
			pool{role: "decode", n: 2, args: map[string]any{"num_gpu_blocks": 1024, "max_num_seqs": decodeSeqs}})
		res := s.runCell(t, cellEnv{router: "kv", engine: "vllm", disagg: true, ns: ns, vus: vllmDisaggVUs})
		assert.NotZero(t, res.took, "the cell ran")
		assert.GreaterOrEqual(t, res.hitRate, kvHits, "kv's hit rate over the secure plane")
	})
}

func etcdTLS(pool *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
