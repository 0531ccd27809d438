package distributed

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
)

// testCerts writes a CA, a server pair for 127.0.0.1 and a client pair,
// PEM, into a temp dir.
func testCerts(t *testing.T) *serverTLS {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mocker test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	out := &serverTLS{CA: write("ca.pem", "CERTIFICATE", caDER)}
	pair := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		c := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, c, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
	}
	out.ServerCert, out.ServerKey = pair("server", 2, x509.ExtKeyUsageServerAuth)
	// Not a user name etcd knows: a client certificate alone grants nothing.
	out.ClientCert, out.ClientKey = pair("mocker-client", 3, x509.ExtKeyUsageClientAuth)
	return out
}

// TestAuth_TLSAndPasswordsOnBothPlanes runs a disaggregated cluster over
// a NATS and an etcd that speak TLS only, verify client certificates and
// require a password: every request completes. A client without the
// certificate, or without the password, is refused by both.
func TestAuth_TLSAndPasswordsOnBothPlanes(t *testing.T) {
	t.Parallel()
	certs := testCerts(t)
	ls, err := startServicesTLS(true, certs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ls.close() })
	const ns = "tls"
	startWorkers(t, ls, ns,
		worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: []byte(`{"speedup_ratio": 10}`)},
		worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: []byte(`{"speedup_ratio": 10}`)})
	c, err := cluster.New(attachConfig(ls, ns))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	for range 4 {
		r := c.Generate(context.Background(), cluster.Request{PromptTokens: 256, MaxTokens: 8})
		require.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
		assert.Equal(t, "transferred", r.HoldOutcome)
	}
	drainedClean(t, c)

	noCert := ls.natsAuth
	noCert.TLS = cluster.TLSFiles{CA: certs.CA}
	_, err = plane.DialNATS(ls.natsURL, "no-cert", noCert)
	assert.Error(t, err, "NATS without a client certificate")
	noPassword := ls.natsAuth
	noPassword.User, noPassword.Password = "", ""
	_, err = plane.DialNATS(ls.natsURL, "no-password", noPassword)
	assert.ErrorIs(t, err, nats.ErrAuthorization, "NATS without a password")

	etcdNoCert := ls.etcdAuth
	etcdNoCert.TLS = cluster.TLSFiles{CA: certs.CA}
	_, err = plane.DialEtcd(context.Background(), []string{ls.etcdURL}, etcdNoCert)
	assert.Error(t, err, "etcd without a client certificate")
	etcdNoPassword := ls.etcdAuth
	etcdNoPassword.Username, etcdNoPassword.Password = "", ""
	ec, err := plane.DialEtcd(context.Background(), []string{ls.etcdURL}, etcdNoPassword)
	if err == nil {
		_, err = ec.Put(context.Background(), plane.RegistrationKey(ns, 1), "{}")
		_ = ec.Close()
	}
	assert.Error(t, err, "etcd without a password")
}
