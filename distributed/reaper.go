package distributed

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/storage/wal"
)

// ReaperCommand is the hidden command local mode runs beside its workers
// (`BIN local-data-reaper DIR`, see RunReaper): the mocker binary
// dispatches it to RunReaper.
const ReaperCommand = "local-data-reaper"

// walSegmentBytes is the size the embedded etcd preallocates for each of
// its WAL segments (64 MB by default): local mode's etcd holds a few
// registrations and leases, for which a few MB are plenty, and this
// bounds what a run that could not clean up leaves.
const walSegmentBytes = 4 << 20

func init() {
	// Only local mode's embedded etcd writes a WAL in this program.
	wal.SegmentSizeBytes = walSegmentBytes
}

// RunReaper is local mode's reaper of the embedded etcd's data: started
// with its standard input on a pipe that only the run holds open, it
// waits for end of file, which comes when the run closes the pipe or dies
// (a SIGKILL included), then removes dir. Interrupts aimed at the run's
// process group do not stop it. It removes nothing but a data directory
// of local mode in the temp directory.
func RunReaper(args []string, stdin io.Reader) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	return reap(args, stdin)
}

// reap is RunReaper but for the signals.
func reap(args []string, stdin io.Reader) int {
	if len(args) != 1 || !isLocalDataDir(args[0]) {
		fmt.Fprintf(os.Stderr, "mocker %s: want one data directory %s*-* of local mode in %s, got %q\n", ReaperCommand, etcdDirPrefix, os.TempDir(), args)
		return exitReaperUsage
	}
	_, _ = io.Copy(io.Discard, stdin)
	if err := os.RemoveAll(args[0]); err != nil {
		fmt.Fprintf(os.Stderr, "mocker %s: %v\n", ReaperCommand, err)
		return 1
	}
	return 0
}

// exitReaperUsage is the usage exit code of the mocker command line.
const exitReaperUsage = 2

// isLocalDataDir says whether dir names a data directory of local mode:
// mocker-etcd-pid{PID}-{random}, directly in the temp directory.
func isLocalDataDir(dir string) bool {
	rest, ok := strings.CutPrefix(filepath.Base(dir), etcdDirPrefix)
	return ok && filepath.Clean(filepath.Dir(dir)) == filepath.Clean(os.TempDir()) && strings.Contains(rest, "-")
}

// reaper is the running reaper of a run's data: closing its pipe lets it
// go.
type reaper struct {
	cmd  *exec.Cmd
	pipe *os.File
}

// startReaper starts bin's reaper of dir.
func startReaper(bin, dir string) (*reaper, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, ReaperCommand, dir)
	cmd.Stdin = r
	cmd.Stderr = os.Stderr
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("transport local: starting the data reaper (%s): %w", bin, err)
	}
	return &reaper{cmd: cmd, pipe: w}, nil
}

// stop lets the reaper go (the data is removed by then) and waits for it;
// how it exits does not matter then.
func (r *reaper) stop() error {
	_ = r.pipe.Close()
	done := make(chan struct{})
	go func() {
		_ = r.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
		return errors.New("transport local: the data reaper did not exit")
	}
}
