package worker

import (
	"context"
	"fmt"
	"sync"
)

// MaxFleet bounds the workers one process runs (RunFleet's count).
const MaxFleet = 1024

// Fleet is a set of workers run in one process: Count copies of Config,
// each a worker of its own.
type Fleet struct {
	Config Config
	// Count is how many workers to run, 1 to MaxFleet; 0 means 1.
	Count int
	// NamePrefix names the workers NamePrefix-0 … NamePrefix-(Count-1).
	// Empty takes Config.Name as the prefix; one of them is required when
	// Count is more than 1. With Count 1 and no NamePrefix the worker is
	// named as Run names it (Config.Name, or its default).
	NamePrefix string
}

// Names are the names of f's workers, in order; it fails (a usage error)
// on a count or prefix that makes no sense.
func (f Fleet) Names() ([]string, error) {
	n := f.Count
	if n == 0 {
		n = 1
	}
	if n < 1 || n > MaxFleet {
		return nil, usage(fmt.Errorf("--count %d: want 1 to %d", f.Count, MaxFleet))
	}
	prefix := f.NamePrefix
	if prefix != "" && f.Config.Name != "" && n > 1 {
		return nil, usage(fmt.Errorf("--name %q and --name-prefix %q: give one (with --count, --name is the prefix)", f.Config.Name, prefix))
	}
	if prefix == "" && n > 1 {
		prefix = f.Config.Name
	}
	if prefix == "" {
		if n > 1 {
			return nil, usage(fmt.Errorf("--count %d: needs --name-prefix (or --name) so that the workers have names of their own", n))
		}
		return []string{f.Config.Name}, nil
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return names, nil
}

// runOne runs one worker of a fleet; a test replaces it.
var runOne = Run

// RunFleet runs f's workers in this process, each a worker as Run runs it:
// its own etcd lease and registration (so its own instance id and NATS
// subjects), its own etcd and NATS connections, plane key and, for a
// prefill, transfer server on a port of its own. Worker i's seed is
// Config.Seed+i, so that the workers' outputs differ. When ctx ends they
// all drain, each up to the drain timeout, and RunFleet returns once every
// one has left. A worker that cannot start stops the others (they drain
// and leave) and RunFleet returns its error, naming it; a usage error
// stays one (IsUsage).
func RunFleet(ctx context.Context, f Fleet) error {
	names, err := f.Names()
	if err != nil {
		return err
	}
	if len(names) == 1 && f.NamePrefix == "" {
		return runOne(ctx, f.Config)
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for i, name := range names {
		cfg := f.Config
		cfg.Name = name
		cfg.Seed = f.Config.Seed + uint64(i)
		wg.Go(func() {
			err := runOne(fctx, cfg)
			if err == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			// The first failure is the cause; the others' come of the
			// fleet stopping.
			if first == nil {
				first = fmt.Errorf("worker %s: %w", name, err)
				if len(names) > 1 {
					first = fmt.Errorf("%w (the fleet's other %d workers were stopped)", first, len(names)-1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}
