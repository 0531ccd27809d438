// Package worker is the worker side of distributed mode, `mocker worker`:
// Run keeps one engine worker in this process on its own loop, paced
// against the wall clock (or, for a router that asks to drive it, on that
// router's modeled clock: a coupled session), registered in etcd under a
// 10 s lease that it renews; should the lease be lost (revoked, or
// expired while etcd was out of reach), it ends the sessions it carried
// and registers again under a new one, off its loop (etcd out of reach
// holds up nothing else it does). It takes its routers' commands on NATS,
// applies each session's once and in order, and publishes its frames
// (pass outputs, input replies, transfer steps) numbered and kept for
// resending. A prefill worker runs a transfer server on its advertised
// host; a decode dials only the transfer servers that registered prefill
// workers advertise (prefills.go). RunFleet runs several such workers in
// one process (`mocker worker --count N`), each with its own connections,
// lease and transfer server, and stops them together (fleet.go).
//
// The worker resolves its engine args as the cluster resolves a pool's
// (cluster.WorkerArgs) and runs a handoff's transfer steps with the same
// code as the in-process cluster (package transfer). The wire format, the
// seals and the etcd keys it shares with the router side (package
// distributed) are in distributed/internal/plane.
package worker
