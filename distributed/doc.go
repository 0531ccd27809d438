// Package distributed runs mock workers in their own processes and the
// cluster's router in the script's process, found through etcd and
// talking over NATS (DESIGN.md §6).
//
// The worker side is RunWorker (`mocker worker`): one engine worker on its
// own loop paced against the wall clock, registered under a 10 s etcd
// lease, taking commands and publishing frames on NATS, and for a prefill
// worker a transfer server on its advertised host. The router side is the
// cluster.Transport that Start builds (registered with the cluster package
// on import): it lists and watches the namespace's registrations, joins
// and removes workers in the cluster's loop, and carries the loop's inputs
// and transfer-room steps to them. The handoff machine and everything the
// in-process cluster computes run unchanged on top.
//
// Keys and subjects are in keys.go and wire.go; Dynamo's discovery keys are
// written alongside ours so a Dynamo user's tools read them.
package distributed
