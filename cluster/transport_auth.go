package cluster

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/kvstrand/mocker/internal/jsonval"
)

// The environment variables a worker and a router read their secrets
// from when their config names none: secrets stay off the command line,
// where `ps` shows them to every user of the host.
const (
	EnvNATSUser     = "MOCKER_NATS_USER"
	EnvNATSPassword = "MOCKER_NATS_PASSWORD"
	EnvNATSToken    = "MOCKER_NATS_TOKEN"
	EnvEtcdUsername = "MOCKER_ETCD_USERNAME"
	EnvEtcdPassword = "MOCKER_ETCD_PASSWORD"
)

// Secret is a credential (a password, a token). It prints, logs and
// encodes as "[redacted]", so a config echoed into an error, a log or a
// summary never shows it.
type Secret string

const redacted = "[redacted]"

// String is "[redacted]", or "" when the secret is empty.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from showing the secret.
func (s Secret) GoString() string { return s.String() }

// MarshalJSON encodes the secret as "[redacted]".
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// LogValue keeps log/slog from showing the secret.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Reveal is the secret itself, for the client that presents it.
func (s Secret) Reveal() string { return string(s) }

// TLSFiles are the PEM files of a TLS client: the CA that signs the
// server's certificate and, for servers that verify clients, the client's
// certificate and key.
type TLSFiles struct {
	CA   string `json:"ca,omitempty"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

// Set reports whether any TLS file is given.
func (t TLSFiles) Set() bool { return t.CA != "" || t.Cert != "" || t.Key != "" }

func (t TLSFiles) validate(path string) error {
	if (t.Cert == "") != (t.Key == "") {
		return fmt.Errorf("%s: cert and key go together (a client certificate and its key)", path)
	}
	return nil
}

// NATSAuth is how a client proves itself to NATS, in the ways NATS
// servers are run: a user and password, a token, a credentials file (JWT
// and NKey seed) or an NKey seed file, and TLS.
type NATSAuth struct {
	User     string   `json:"user,omitempty"`
	Password Secret   `json:"password,omitempty"`
	Token    Secret   `json:"token,omitempty"`
	Creds    string   `json:"creds,omitempty"` // a .creds file
	NKey     string   `json:"nkey,omitempty"`  // an NKey seed file
	TLS      TLSFiles `json:"tls,omitzero"`
}

// EtcdAuth is how a client proves itself to etcd: a user and password,
// and TLS (a client certificate is etcd's other way to name a user).
type EtcdAuth struct {
	Username string   `json:"username,omitempty"`
	Password Secret   `json:"password,omitempty"`
	TLS      TLSFiles `json:"tls,omitzero"`
}

func (a NATSAuth) validate(path string) error {
	n := 0
	for _, set := range []bool{a.User != "" || a.Password != "", a.Token != "", a.Creds != "", a.NKey != ""} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return fmt.Errorf("%s: give one of user and password, token, creds or nkey", path)
	case (a.User == "") != (a.Password == ""):
		return fmt.Errorf("%s: user and password go together", path)
	}
	return a.TLS.validate(path + ".tls")
}

func (a EtcdAuth) validate(path string) error {
	if (a.Username == "") != (a.Password == "") {
		return fmt.Errorf("%s: username and password go together", path)
	}
	return a.TLS.validate(path + ".tls")
}

// natsFromObject reads transport.nats in its object form:
// {url, user, password, token, creds, nkey, tls: {ca, cert, key}}.
func natsFromObject(path string, obj map[string]any, t *TransportConfig) error {
	for _, k := range sortedKeys(obj) {
		field := path + "." + k
		var err error
		var s string
		switch k {
		case "url":
			t.NATS, err = stringValue(field, obj[k])
		case "user":
			t.NATSAuth.User, err = stringValue(field, obj[k])
		case "password":
			s, err = stringValue(field, obj[k])
			t.NATSAuth.Password = Secret(s)
		case "token":
			s, err = stringValue(field, obj[k])
			t.NATSAuth.Token = Secret(s)
		case "creds":
			t.NATSAuth.Creds, err = stringValue(field, obj[k])
		case "nkey":
			t.NATSAuth.NKey, err = stringValue(field, obj[k])
		case "tls":
			t.NATSAuth.TLS, err = tlsFromMap(field, obj[k])
		default:
			err = fmt.Errorf("%s: unknown key; valid keys: creds, nkey, password, tls, token, url, user", field)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// etcdFromObject reads transport.etcd in its object form:
// {endpoints, username, password, tls: {ca, cert, key}}.
func etcdFromObject(path string, obj map[string]any, t *TransportConfig) error {
	for _, k := range sortedKeys(obj) {
		field := path + "." + k
		var err error
		switch k {
		case "endpoints":
			t.Etcd, err = endpointsValue(field, obj[k])
		case "username":
			t.EtcdAuth.Username, err = stringValue(field, obj[k])
		case "password":
			var s string
			s, err = stringValue(field, obj[k])
			t.EtcdAuth.Password = Secret(s)
		case "tls":
			t.EtcdAuth.TLS, err = tlsFromMap(field, obj[k])
		default:
			err = fmt.Errorf("%s: unknown key; valid keys: endpoints, password, tls, username", field)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func tlsFromMap(path string, v any) (TLSFiles, error) {
	var t TLSFiles
	obj, err := objectValue(path, v)
	if err != nil || obj == nil {
		return t, err
	}
	for _, k := range sortedKeys(obj) {
		field := path + "." + k
		switch k {
		case "ca":
			t.CA, err = stringValue(field, obj[k])
		case "cert":
			t.Cert, err = stringValue(field, obj[k])
		case "key":
			t.Key, err = stringValue(field, obj[k])
		default:
			err = fmt.Errorf("%s: unknown key; valid keys: ca, cert, key", field)
		}
		if err != nil {
			return t, err
		}
	}
	return t, nil
}

// endpointsValue reads a list of etcd endpoint URLs (or one).
func endpointsValue(field string, v any) ([]string, error) {
	switch e := v.(type) {
	case string:
		return []string{e}, nil
	case []string:
		return append([]string(nil), e...), nil
	case []any:
		var out []string
		for i, x := range e {
			s, err := stringValue(fmt.Sprintf("%s[%d]", field, i), x)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: want a list of endpoint URLs, got %s", field, jsonval.Describe(v))
}
