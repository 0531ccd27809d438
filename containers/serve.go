package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// ServeImageRepo is the repository of the `mocker serve` image: the same
// static mocker binary as the worker image, on scratch, whose default
// command serves a cluster of two aggregated vLLM workers on port
// [ServePort] of every interface. Its tag is the binary's content hash.
const ServeImageRepo = "mocker-local/mocker-serve"

// Ports the serve image uses: the OpenAI API on ServePort, and with
// [ServeSpec.WorkerPorts] each worker rank on ServeWorkerPortBase + its
// index.
const (
	ServePort           = 8000
	ServeWorkerPortBase = 8100
)

// serveConfigPath is where StartServe puts the cluster config.
const serveConfigPath = "/etc/mocker/cluster.json"

// BuildServeImage compiles the mocker binary (./cmd/mocker) as a static
// Linux binary and returns the reference of an image that runs `mocker
// serve --listen 0.0.0.0:8000`, mocker-local/mocker-serve:<content hash>.
// Like [BuildWorkerImage], the compile runs each call and the image is
// built only when no image of that content exists yet. Arguments given to
// the container replace the default command: run it as
//
//	docker run -p 8000:8000 mocker-local/mocker-serve:<tag>
//	docker run -p 8000:8000 -v $PWD/cluster.yaml:/cluster.yaml mocker-local/mocker-serve:<tag> \
//	    serve --listen 0.0.0.0:8000 --config /cluster.yaml
func BuildServeImage(ctx context.Context) (string, error) {
	return buildMockerImage(ctx, ServeImageRepo, ImageSpec{
		Cmd:          []string{"serve", "--listen", "0.0.0.0:" + strconv.Itoa(ServePort)},
		ExposedPorts: []string{strconv.Itoa(ServePort) + "/tcp"},
	})
}

// ServeSpec is one `mocker serve` container.
type ServeSpec struct {
	// Image is the serve image; default [BuildServeImage]'s.
	Image string
	// Config is the cluster config, the object mocker.cluster({...})
	// takes; nil serves the default cluster.
	Config map[string]any
	// WorkerPorts, when positive, serves that many worker ranks on their
	// own ports (--worker-ports) and publishes them: the cluster's worker
	// ranks, as many as the config has.
	WorkerPorts int
	// Flags are more `mocker serve` flags (e.g. "--log-level", "debug").
	Flags []string
}

// Serve is a running `mocker serve` container.
type Serve struct {
	ctr     testcontainers.Container
	workers int
}

// serveReadyTimeout bounds the wait for /health to answer.
const serveReadyTimeout = time.Minute

// StartServe starts a `mocker serve` container and waits until its
// /health answers 200.
func StartServe(ctx context.Context, spec ServeSpec) (*Serve, error) {
	if spec.Image == "" {
		ref, err := BuildServeImage(ctx)
		if err != nil {
			return nil, err
		}
		spec.Image = ref
	}
	cmd := []string{"serve", "--listen", "0.0.0.0:" + strconv.Itoa(ServePort)}
	ports := []string{strconv.Itoa(ServePort) + "/tcp"}
	var files []testcontainers.ContainerFile
	if spec.Config != nil {
		b, err := json.Marshal(spec.Config)
		if err != nil {
			return nil, fmt.Errorf("serve container: config: %w", err)
		}
		files = append(files, testcontainers.ContainerFile{Reader: bytes.NewReader(b), ContainerFilePath: serveConfigPath, FileMode: 0o644})
		cmd = append(cmd, "--config", serveConfigPath)
	}
	if spec.WorkerPorts > 0 {
		cmd = append(cmd, "--worker-ports", strconv.Itoa(ServeWorkerPortBase))
		for i := range spec.WorkerPorts {
			ports = append(ports, strconv.Itoa(ServeWorkerPortBase+i)+"/tcp")
		}
	}
	cmd = append(cmd, spec.Flags...)
	labels := ownerLabels()
	labels[LabelOwner+".kind"] = "serve"
	req := testcontainers.ContainerRequest{
		Image:        spec.Image,
		Cmd:          cmd,
		Labels:       labels,
		ExposedPorts: ports,
		Files:        files,
		WaitingFor: wait.ForHTTP("/health").WithPort(strconv.Itoa(ServePort) + "/tcp").
			WithStartupTimeout(serveReadyTimeout),
	}
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req, Started: true, Logger: tcLogger{},
	})
	if err != nil {
		err = fmt.Errorf("start mocker serve (image %s): %w%s", spec.Image, err, logTail(ctr))
		if ctr != nil {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			err = errors.Join(err, withoutNotFound(ctr.Terminate(tctx)))
		}
		return nil, err
	}
	return &Serve{ctr: ctr, workers: spec.WorkerPorts}, nil
}

// URL is the OpenAI API's base URL as the host reaches it,
// "http://host:port" (append /v1/completions, /metrics, ...).
func (s *Serve) URL(ctx context.Context) (string, error) {
	return s.url(ctx, ServePort)
}

// WorkerURL is worker rank i's endpoint as the host reaches it (ranks in
// the order `mocker serve` logs them).
func (s *Serve) WorkerURL(ctx context.Context, i int) (string, error) {
	if i < 0 || i >= s.workers {
		return "", fmt.Errorf("worker port %d: the container publishes %d (ServeSpec.WorkerPorts)", i, s.workers)
	}
	return s.url(ctx, ServeWorkerPortBase+i)
}

func (s *Serve) url(ctx context.Context, port int) (string, error) {
	host, err := s.ctr.Host(ctx)
	if err != nil {
		return "", fmt.Errorf("mocker serve container host: %w", err)
	}
	p, err := s.ctr.MappedPort(ctx, strconv.Itoa(port)+"/tcp")
	if err != nil {
		return "", fmt.Errorf("mocker serve container port %d: %w", port, err)
	}
	return fmt.Sprintf("http://%s:%d", host, p.Num()), nil
}

// Terminate stops the container (SIGTERM, so the server drains) and
// removes it; on a container already gone it is a no-op.
func (s *Serve) Terminate(ctx context.Context) error {
	if err := withoutNotFound(s.ctr.Terminate(ctx, testcontainers.StopTimeout(15*time.Second))); err != nil {
		return fmt.Errorf("terminate mocker serve: %w", err)
	}
	return nil
}
