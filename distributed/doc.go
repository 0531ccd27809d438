// Package distributed runs mock workers in their own processes and the
// cluster's router in the script's process, found through etcd and talking
// over NATS (docs/design.md §5).
//
// The worker side, `mocker worker`, is package distributed/worker: one
// engine worker per process, registered under a 10 s etcd lease, taking
// commands and publishing frames on NATS, and for a prefill worker a
// transfer server on its advertised host. The router side is the
// cluster.Transport that Start builds (registered with the cluster package
// on import): it lists and watches the namespace's registrations, joins
// and removes workers in the cluster's loop, and carries the loop's inputs
// and transfer-room steps to them. The handoff machine and everything the
// in-process cluster computes run unchanged on top. What both sides share
// (the wire format, seals, keys) is in distributed/internal/plane.
//
// The request plane rides core NATS, which delivers at most once, and
// makes it reliable itself (no JetStream): commands carry a per-worker
// session and sequence number and are applied by the worker once and in
// order, acknowledged in its frames and published again until they are;
// frames are numbered, kept by the worker for a while and applied by the
// router once and in order, a gap or a NATS reconnect asking for them
// again. A NATS restart with requests in flight loses none of them. Only
// frames the worker no longer keeps are lost for good: the requests on it
// then end with an error saying so, and the worker withdraws them when the
// router closes their session. A router keeps a key of its own under its
// lease, named in each session's hello: when the key goes (the router was
// killed, or cut off from etcd past its lease), the workers withdraw that
// router's requests the same way. plane's wire.go has the protocol.
//
// Every command and frame is sealed with a MAC under a key its router
// session and worker derive from X25519 keys published in etcd under their
// leases (plane's seal.go); whatever fails, or comes from a registration
// not under its own lease, is dropped and counted at the gates, never
// applied.
//
// Dynamo's discovery keys are written alongside ours so a Dynamo user's
// tools read them.
package distributed
