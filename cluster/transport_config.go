package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// DefaultNamespace is the namespace of a distributed cluster that names
// none, as Dynamo's examples use "dynamo".
const DefaultNamespace = "mocker"

// transportFromString reads the one string form: "local".
func transportFromString(path, s string) (*TransportConfig, error) {
	if s != "local" {
		return nil, fmt.Errorf("%s: want 'local' or {etcd: [...], nats: '...', namespace: '...'}, got %q", path, s)
	}
	return &TransportConfig{Local: true}, nil
}

// NamespaceOrDefault is the namespace the transport uses.
func (t *TransportConfig) NamespaceOrDefault() string {
	if t.Namespace == "" {
		return DefaultNamespace
	}
	return t.Namespace
}

// Validate checks a transport config, naming the field at fault; nil (in
// process) is valid.
func (t *TransportConfig) Validate() error {
	if t == nil {
		return nil
	}
	if ns := t.Namespace; ns != "" {
		for _, r := range ns {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return fmt.Errorf("transport.namespace: %q: use letters, digits, '-' and '_' only (it is a NATS subject token and an etcd key segment)", ns)
			}
		}
	}
	if t.Local {
		if len(t.Etcd) > 0 || t.NATS != "" || t.NATSAuth != (NATSAuth{}) || t.EtcdAuth != (EtcdAuth{}) {
			return errors.New("transport.local: starts its own etcd and NATS; leave etcd and nats out, or drop local to attach to yours")
		}
		return nil
	}
	if len(t.Etcd) == 0 {
		return errors.New("transport.etcd: want at least one endpoint URL, e.g. ['http://127.0.0.1:2379']")
	}
	for i, e := range t.Etcd {
		if u, err := url.Parse(e); err != nil || u.Host == "" {
			return fmt.Errorf("transport.etcd[%d]: %q is not an endpoint URL such as http://127.0.0.1:2379", i, RedactURL(e))
		}
	}
	if t.NATS == "" {
		return errors.New("transport.nats: want the NATS server URL, e.g. 'nats://127.0.0.1:4222'")
	}
	if u, err := url.Parse(t.NATS); err != nil || u.Host == "" || !strings.HasPrefix(u.Scheme, "nats") && u.Scheme != "tls" {
		return fmt.Errorf("transport.nats: %q is not a NATS URL such as nats://127.0.0.1:4222", RedactURL(t.NATS))
	}
	if err := t.NATSAuth.validate("transport.nats"); err != nil {
		return err
	}
	return t.EtcdAuth.validate("transport.etcd")
}

// RedactURL hides a password a URL carries (nats://user:pass@host) from
// the messages and logs that name it.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if strings.Contains(s, "@") {
			return "[a URL with credentials, unreadable]"
		}
		return s
	}
	return u.Redacted()
}
