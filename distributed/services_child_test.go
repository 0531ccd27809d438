package distributed

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/kvstrand/mocker/cluster"
)

// servicesChildEnv, set in a test binary's environment, makes it run an
// embedded etcd and NATS (with the run's credentials) instead of its
// tests: it writes their URLs and credentials as one JSON line to stdout
// and serves until its stdin closes. A benchmark that measures one
// process's CPU keeps the services out of that process this way.
const servicesChildEnv = "MOCKER_TEST_SERVICES_CHILD"

type servicesInfo struct {
	Etcd, NATS         string
	NATSUser, NATSPass string
	EtcdUser, EtcdPass string
}

// runServicesChild is the child's side; it returns only when the binary
// is not one.
func runServicesChild() {
	if os.Getenv(servicesChildEnv) != "1" {
		return
	}
	ls, err := startServices(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(servicesInfo{Etcd: ls.etcdURL, NATS: ls.natsURL,
		NATSUser: ls.natsAuth.User, NATSPass: ls.natsAuth.Password.Reveal(),
		EtcdUser: ls.etcdAuth.Username, EtcdPass: ls.etcdAuth.Password.Reveal()})
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = ls.close()
	os.Exit(0)
}

// servicesProcess is an etcd and NATS run by a child process.
type servicesProcess struct {
	*localServices
	cmd   *exec.Cmd
	stdin io.Closer
}

// startServicesProcess starts this test binary as a services child and
// returns services whose spawn and close work as local mode's, less the
// embedded servers, which the child runs.
func startServicesProcess() (*servicesProcess, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), servicesChildEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	var info servicesInfo
	if err == nil {
		err = json.Unmarshal(line, &info)
	}
	if err != nil {
		_ = stdin.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("services child: %w", err)
	}
	ls := &localServices{etcdURL: info.Etcd, natsURL: info.NATS}
	ls.natsAuth.User, ls.natsAuth.Password = info.NATSUser, cluster.Secret(info.NATSPass)
	ls.etcdAuth.Username, ls.etcdAuth.Password = info.EtcdUser, cluster.Secret(info.EtcdPass)
	return &servicesProcess{localServices: ls, cmd: cmd, stdin: stdin}, nil
}

// close stops the workers, then the services child.
func (sp *servicesProcess) close() error {
	err := sp.localServices.close()
	_ = sp.stdin.Close()
	if werr := sp.cmd.Wait(); err == nil {
		err = werr
	}
	return err
}
