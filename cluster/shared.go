package cluster

import (
	"errors"
	"fmt"
	"sync"
)

// registry holds the process-wide clusters of Shared, by name.
var registry = struct {
	mu       sync.Mutex
	clusters map[string]sharedEntry
}{clusters: make(map[string]sharedEntry)}

type sharedEntry struct {
	fingerprint string
	c           *Cluster
}

// Shared returns the process-wide cluster named cfg.Name ("default" when
// empty), starting it on first use, so every VU of a script that calls
// mocker.cluster({...}) gets the same one. Asking again with the same
// config returns the same cluster; a different config under a name already
// in use is an error naming the name. A shared cluster closed directly is
// replaced on the next call.
func Shared(cfg Config) (*Cluster, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	fp := cfg.fingerprint()
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if e, ok := registry.clusters[cfg.Name]; ok {
		e.c.mu.Lock()
		closed := e.c.closed
		e.c.mu.Unlock()
		if !closed {
			if e.fingerprint != fp {
				return nil, fmt.Errorf("name: cluster %q already runs with a different config; use another name or the same config", cfg.Name)
			}
			return e.c, nil
		}
	}
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	registry.clusters[cfg.Name] = sharedEntry{fingerprint: fp, c: c}
	return c, nil
}

// CloseShared closes every cluster Shared started and empties the registry.
func CloseShared() error {
	registry.mu.Lock()
	entries := registry.clusters
	registry.clusters = make(map[string]sharedEntry)
	registry.mu.Unlock()
	var errs []error
	for _, e := range entries {
		if err := e.c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cluster %q: %w", e.c.Name(), err))
		}
	}
	return errors.Join(errs...)
}
