//go:build unix

package containers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// processAlive reports whether a process with this id exists on this host.
// EPERM means it exists but belongs to someone else: still alive.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// lockFile takes an exclusive advisory lock on path, creating it, so that
// test binaries running side by side build a given image once rather than
// each compiling etcd on a two-core machine. It polls rather than blocks so
// that ctx can end the wait. The returned func releases the lock.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for lock %s (another process is building this image): %w", path, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
