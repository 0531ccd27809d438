// Package e2e runs mocker's distributed mode end to end over real
// services: etcd, NATS and `mocker worker` containers on one Docker
// network (package containers), with the router in the test process as a
// script's cluster would have it. Run with `make e2e`; the tests skip
// without a Docker engine, and fail instead when CI=true.
package e2e
