// Package k6http is the k6/http module of the harness: k6's HTTP client
// API (request, get, post, batch, asyncRequest, cookie jars, expected
// statuses) and its built-in metrics (http_reqs, http_req_duration and its
// parts, http_req_failed, data_sent, data_received), with k6's tags and
// error codes.
//
// The package knows nothing of the harness's runner: the harness hands each
// VU's module instance a VU (the few things a request needs from the
// virtual user) and a Shared (what every VU of one run shares: the
// metrics and the HTTP options). Requests are measured on the wall clock;
// every VU has its own connections, reused within the VU and never across
// VUs, as in k6. A VU's plain-HTTP requests are written and read on its
// own goroutine (direct.go); HTTPS and the rest go through net/http's
// Transport, timed with net/http/httptrace.
package k6http
