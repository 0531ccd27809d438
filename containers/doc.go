// Package containers starts the real services that mocker's distributed mode
// depends on — etcd for discovery and NATS for events and requests — as Docker
// containers driven by testcontainers-go, and builds container images of Go
// programs from this repository (the mocker worker and `mocker serve`
// among them: [BuildWorkerImage], [BuildServeImage], [StartServe]).
//
// Images come from one of two places. Official images (etcd from
// gcr.io/etcd-development/etcd, NATS from the Docker Hub "nats" repository)
// are used when they are present or can be pulled. Otherwise the servers are
// compiled from the Go modules this repository already pins
// (go.etcd.io/etcd/server/v3 and github.com/nats-io/nats-server/v2) into
// static binaries on a scratch image, tagged with the module version
// (mocker-local/etcd:v3.7.3, mocker-local/nats:v2.15.2), so the build happens
// once per machine. MOCKER_IMAGES=official|local|auto chooses; auto is the
// default. See [ImageStrategy].
//
// Every container carries the label org.kvstrand.mocker=1 plus the owning
// process's identity, so [Sweep] can remove what a killed test run left
// behind without touching the containers of a test binary still running.
//
// Tests normally use the helpers [EtcdForTest], [NATSForTest] and
// [StackForTest], which skip when no Docker engine is reachable and fail
// instead when CI=true (see [RequireDocker]).
package containers
