package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTransportConfig_CredentialsInTheirObjectForms: nats and etcd take an
// object with credentials and TLS files beside the plain forms, and the
// secrets read stay secrets.
func TestTransportConfig_CredentialsInTheirObjectForms(t *testing.T) {
	t.Parallel()
	tc, err := transportFromMap("transport", map[string]any{
		"nats": map[string]any{"url": "tls://127.0.0.1:4222", "user": "u", "password": "p",
			"tls": map[string]any{"ca": "ca.pem", "cert": "c.pem", "key": "k.pem"}},
		"etcd": map[string]any{"endpoints": []any{"https://127.0.0.1:2379"}, "username": "root", "password": "q",
			"tls": map[string]any{"ca": "ca.pem"}},
	})
	require.NoError(t, err)
	require.NoError(t, tc.Validate())
	assert.Equal(t, "tls://127.0.0.1:4222", tc.NATS)
	assert.Equal(t, []string{"https://127.0.0.1:2379"}, tc.Etcd)
	assert.Equal(t, NATSAuth{User: "u", Password: "p", TLS: TLSFiles{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}}, tc.NATSAuth)
	assert.Equal(t, EtcdAuth{Username: "root", Password: "q", TLS: TLSFiles{CA: "ca.pem"}}, tc.EtcdAuth)
	assert.Equal(t, "p", tc.NATSAuth.Password.Reveal())
	assert.Equal(t, "[redacted]", tc.EtcdAuth.Password.String())
}

func TestTransportConfig_CredentialErrorsNameTheField(t *testing.T) {
	t.Parallel()
	nats := func(o map[string]any) map[string]any {
		o["url"] = "nats://127.0.0.1:4222"
		return map[string]any{"etcd": []any{"http://127.0.0.1:2379"}, "nats": o}
	}
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"user without password", nats(map[string]any{"user": "u"}), "transport.nats: user and password go together"},
		{"two ways in", nats(map[string]any{"token": "t", "creds": "x.creds"}), "transport.nats: give one of"},
		{"cert without key", nats(map[string]any{"tls": map[string]any{"cert": "c.pem"}}), "transport.nats.tls: cert and key go together"},
		{"unknown nats key", nats(map[string]any{"pass": "p"}), "transport.nats.pass: unknown key"},
		{"unknown etcd key", map[string]any{"etcd": map[string]any{"endpoint": "x"}}, "transport.etcd.endpoint: unknown key"},
		{"etcd username alone", map[string]any{"nats": "nats://127.0.0.1:4222",
			"etcd": map[string]any{"endpoints": "http://127.0.0.1:2379", "username": "u"}}, "transport.etcd: username and password go together"},
		{"local with credentials", map[string]any{"local": true, "nats": map[string]any{"user": "u", "password": "p"}}, "transport.local: starts its own"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tc, err := transportFromMap("transport", tt.in)
			if err == nil {
				err = tc.Validate()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), `"p"`)
		})
	}
}

func TestRedactURL_HidesThePassword(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "nats://u:xxxxx@127.0.0.1:4222", RedactURL("nats://u:hunter2@127.0.0.1:4222"))
	assert.Equal(t, "http://127.0.0.1:2379", RedactURL("http://127.0.0.1:2379"))
	assert.NotContains(t, RedactURL("nats://u:hun ter2@%zz"), "hun")
}
