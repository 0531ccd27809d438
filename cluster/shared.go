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
	cfg Config
	c   *Cluster
}

// Shared returns the process-wide cluster named cfg.Name ("default" when
// empty), starting it on first use, so every VU of a script that calls
// mocker.cluster({...}) gets the same one. Asking again with the same
// config returns the same cluster. The config is validated first, so a bad
// field is reported as such whatever runs under its name; a valid but
// different config under a name already in use is a NameInUseError naming
// the first key that differs. A shared cluster closed directly is replaced
// on the next call.
func Shared(cfg Config) (*Cluster, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if e, ok := registry.clusters[cfg.Name]; ok {
		e.c.mu.Lock()
		closed := e.c.closed
		e.c.mu.Unlock()
		if !closed {
			if d := e.cfg.Diff(cfg); d != "" {
				return nil, &NameInUseError{Name: cfg.Name, Diff: d}
			}
			return e.c, nil
		}
	}
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	registry.clusters[cfg.Name] = sharedEntry{cfg: cfg, c: c}
	return c, nil
}

// NameInUseError is asking for a cluster by a name that another config
// already uses.
type NameInUseError struct {
	// Name is the cluster name asked for.
	Name string
	// Diff is Config.Diff of the existing config and the new one, e.g.
	// "seed 1 vs 2".
	Diff string
}

// Error reads, e.g., `name: cluster "default" already exists with another
// config: seed 1 vs 2; …`, suggesting the two ways out.
func (e *NameInUseError) Error() string {
	return fmt.Sprintf("name: cluster %q already exists with another config: %s (existing vs this one); give this cluster another name (name: %q), or the same config",
		e.Name, e.Diff, e.Name+"-2")
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
