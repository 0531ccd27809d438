// Package plane is what the two sides of distributed mode share: the
// router in the script's process (package distributed) and the worker
// processes (package distributed/worker). It holds the request plane's
// wire format (wire.go: commands, frames and the protocol that makes core
// NATS reliable), the seals and session keys (seal.go), the etcd keys and
// records (keys.go), Dynamo's event plane (eventplane.go), and how both
// dial NATS and etcd with credentials and TLS (auth.go).
package plane
