// Package e2e runs mocker's distributed mode end to end: etcd, NATS and
// `mocker worker` processes in Docker containers on their own networks,
// and the router in a `mocker run` process (or a test's cluster) attached
// to them, as a serving stack runs them.
//
// The tests are the router-mode matrix (router × engine, disaggregated and
// aggregated, each a k6-style scenario under real pressure whose
// thresholds say what the cell must show) and the fault tests (a worker
// killed, partitioned or frozen; etcd or NATS restarted), each asserting
// that no request and no KV block is lost. They need a Docker engine: they
// skip without one, and fail instead under CI=true. `make e2e` runs them.
package e2e
