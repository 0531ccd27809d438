package k6http

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/metrics"
)

// VU is what the module needs from the virtual user it belongs to. Every
// method is called on the VU's goroutine except where noted.
type VU interface {
	// Runtime is the VU's JavaScript runtime.
	Runtime() *sobek.Runtime
	// Context ends when the VU's current work must stop; requests made
	// under it are cancelled then. It may be watched from any goroutine.
	Context() context.Context
	// InInit reports whether the script's init context is running, where
	// k6 allows no requests.
	InInit() bool
	// Tags are the VU's current tags (options.tags, scenario, group...).
	Tags() metrics.Tags
	// RegisterCallback reserves an event-loop slot (see the harness's VU).
	RegisterCallback() func(func() error)
	// Iteration counts the VU's iterations: a change means a new one
	// began, where cookies are reset (and, with noVUConnectionReuse,
	// connections closed).
	Iteration() int64
	// Emit records samples with exactly the tags they carry.
	Emit(samples []metrics.Sample)
	// Now is the run's clock, which stamps samples.
	Now() time.Time
	// Warn logs a warning on the test's log.
	Warn(msg string)
	// OnRunEnd registers f to run once the test run is over (from any
	// goroutine): the VU's connections are closed there.
	OnRunEnd(f func())
	// Outside runs f, which blocks on sockets, without the VU holding
	// the run's clock meanwhile: on a paced clock the VU waits as in
	// sleep() while f runs on another goroutine, so that the wait counts
	// as script time and other VUs go on.
	Outside(f func())
}

// Shared is what every VU of one run shares: the built-in HTTP metrics
// and the options.
type Shared struct {
	m       builtin
	optsFn  func() (Options, error)
	once    sync.Once
	opts    Options
	optsErr error
}

type builtin struct {
	reqs, failed, duration, blocked, connecting, tls, sending, waiting, receiving *metrics.Metric
	sent, received                                                                *metrics.Metric
}

// NewShared registers the HTTP metrics in reg (under k6's names and types)
// and returns the state one run's VUs share. opts is called once, at the
// first request, after the script's options have been read.
func NewShared(reg *metrics.Registry, opts func() (Options, error)) (*Shared, error) {
	var err error
	get := func(name string, mt metrics.MetricType, vt metrics.ValueType) *metrics.Metric {
		m, rerr := reg.Register(name, mt, vt)
		if rerr != nil && err == nil {
			err = fmt.Errorf("k6/http: %w", rerr)
		}
		return m
	}
	s := &Shared{optsFn: opts}
	s.m = builtin{
		reqs:       get("http_reqs", metrics.Counter, metrics.Default),
		failed:     get("http_req_failed", metrics.Rate, metrics.Default),
		duration:   get("http_req_duration", metrics.Trend, metrics.Time),
		blocked:    get("http_req_blocked", metrics.Trend, metrics.Time),
		connecting: get("http_req_connecting", metrics.Trend, metrics.Time),
		tls:        get("http_req_tls_handshaking", metrics.Trend, metrics.Time),
		sending:    get("http_req_sending", metrics.Trend, metrics.Time),
		waiting:    get("http_req_waiting", metrics.Trend, metrics.Time),
		receiving:  get("http_req_receiving", metrics.Trend, metrics.Time),
		sent:       get("data_sent", metrics.Counter, metrics.Data),
		received:   get("data_received", metrics.Counter, metrics.Data),
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Shared) options() (*Options, error) {
	s.once.Do(func() { s.opts, s.optsErr = s.optsFn() })
	return &s.opts, s.optsErr
}

// Client is one VU's HTTP client: its transport (connections are reused
// within the VU), its cookie jar and its response callback.
type Client struct {
	vu VU
	sh *Shared
	rt *sobek.Runtime

	transport *http.Transport
	// conns are the VU's plain-HTTP connections (direct.go); direct is
	// false under noConnectionReuse, which the transport handles.
	conns  *conns
	direct bool
	jar    *cookiejar.Jar
	jarObj *sobek.Object
	// jarSym keys a cookie jar object's jar, out of the script's sight
	// (a symbol has no name to read and is not enumerated).
	jarSym  *sobek.Symbol
	iter    int64
	started bool

	// callback classifies responses for http_req_failed and the
	// expected_response tag; nil (after setResponseCallback(null))
	// emits neither.
	callback *expected

	// jarUsed says the VU's jar may hold cookies (a response set some,
	// or the script got the jar): the next iteration starts a new one.
	jarUsed atomic.Bool
	// userAgent is the default User-Agent header's value.
	userAgent []string

	samples []metrics.Sample
	// emitTags caches the tag sets of the samples of an exchange (see
	// emit); baseID and dataTags cache the VU's tags, filtered by
	// systemTags, that data_sent and data_received carry.
	emitTags map[emitKey]metrics.Tags
	baseID   metrics.TagsID
	dataTags metrics.Tags
	haveData bool
}

// NewClient returns the k6/http instance of one VU.
func NewClient(vu VU, sh *Shared) *Client {
	return &Client{vu: vu, sh: sh, rt: vu.Runtime(), callback: defaultExpected, jarSym: sobek.NewSymbol("k6/http cookie jar")}
}

// Exports are the module's named exports.
func (c *Client) Exports() map[string]any {
	rt := c.rt
	verb := func(method string, withBody bool) func(sobek.FunctionCall) sobek.Value {
		return func(call sobek.FunctionCall) sobek.Value {
			body, params := sobek.Undefined(), call.Argument(1)
			if withBody {
				body, params = call.Argument(1), call.Argument(2)
			}
			return c.syncRequest(method, call.Argument(0), body, params)
		}
	}
	return map[string]any{
		"request": func(call sobek.FunctionCall) sobek.Value {
			return c.syncRequest(call.Argument(0).String(), call.Argument(1), call.Argument(2), call.Argument(3))
		},
		"asyncRequest": c.asyncRequest,
		"get":          verb(http.MethodGet, false),
		"head":         verb(http.MethodHead, false),
		"post":         verb(http.MethodPost, true),
		"put":          verb(http.MethodPut, true),
		"patch":        verb(http.MethodPatch, true),
		"del":          verb(http.MethodDelete, true),
		"options":      verb(http.MethodOptions, true),
		"batch":        c.batch,
		"expectedStatuses": func(call sobek.FunctionCall) sobek.Value {
			return rt.ToValue(c.parseExpected(call.Arguments))
		},
		"setResponseCallback": func(call sobek.FunctionCall) sobek.Value {
			c.callback = c.toCallback(call.Argument(0), "setResponseCallback")
			return sobek.Undefined()
		},
		"file":      c.file,
		"url":       c.taggedURL,
		"cookieJar": func(sobek.FunctionCall) sobek.Value { return c.vuJarObject() },
		"CookieJar": func(call sobek.ConstructorCall) *sobek.Object {
			jar, _ := cookiejar.New(nil)
			return c.jarObject(jar)
		},
		"TLS_1_0": "tls1.0", "TLS_1_1": "tls1.1", "TLS_1_2": "tls1.2", "TLS_1_3": "tls1.3",
	}
}

// throw raises a JS Error with the message.
func (c *Client) throw(format string, args ...any) {
	errCtor := c.rt.Get("Error")
	obj, err := c.rt.New(errCtor, c.rt.ToValue(fmt.Sprintf(format, args...)))
	if err != nil {
		panic(c.rt.NewGoError(fmt.Errorf(format, args...)))
	}
	panic(obj)
}
