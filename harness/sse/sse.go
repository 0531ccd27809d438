package sse

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/k6http"
	"github.com/kvstrand/mocker/harness/metrics"
)

// Shared is the state one run's VUs share: the metrics.
type Shared struct {
	events, firstEvent, interval *metrics.Metric
	reqs, duration, received     *metrics.Metric
}

// NewShared registers the SSE metrics in reg.
func NewShared(reg *metrics.Registry) (*Shared, error) {
	var err error
	get := func(name string, mt metrics.MetricType, vt metrics.ValueType) *metrics.Metric {
		m, rerr := reg.Register(name, mt, vt)
		if rerr != nil && err == nil {
			err = fmt.Errorf("k6/x/sse: %w", rerr)
		}
		return m
	}
	s := &Shared{
		events:     get("sse_event", metrics.Counter, metrics.Default),
		firstEvent: get("sse_time_to_first_event", metrics.Trend, metrics.Time),
		interval:   get("sse_event_interval", metrics.Trend, metrics.Time),
		reqs:       get("http_reqs", metrics.Counter, metrics.Default),
		duration:   get("http_req_duration", metrics.Trend, metrics.Time),
		received:   get("data_received", metrics.Counter, metrics.Data),
	}
	return s, err
}

// Client is one VU's SSE module instance.
type Client struct {
	vu        k6http.VU
	sh        *Shared
	rt        *sobek.Runtime
	transport *http.Transport
	samples   []metrics.Sample
}

// NewClient returns the module instance of one VU.
func NewClient(vu k6http.VU, sh *Shared) *Client {
	return &Client{vu: vu, sh: sh, rt: vu.Runtime()}
}

// Exports are the module's exports: open.
func (c *Client) Exports() map[string]any {
	return map[string]any{"open": c.open}
}

// Event is one server-sent event.
type Event struct {
	ID   string `js:"id"`
	Name string `js:"name"`
	Data string `js:"data"`
}

// item is what the reading goroutine hands the VU: the response, an
// event, or the error that ended the stream.
type item struct {
	resp  *http.Response
	event *Event
	err   error
	at    time.Time
}

func (c *Client) throw(format string, args ...any) {
	obj, err := c.rt.New(c.rt.Get("Error"), c.rt.ToValue(fmt.Sprintf(format, args...)))
	if err != nil {
		panic(c.rt.NewGoError(fmt.Errorf(format, args...)))
	}
	panic(obj)
}

type request struct {
	method, url string
	body        string
	header      http.Header
	tags        map[string]string
}

func (c *Client) parse(urlArg, params sobek.Value) request {
	r := request{method: http.MethodGet, url: urlArg.String(), header: http.Header{}}
	p, ok := params.(*sobek.Object)
	if !ok {
		return r
	}
	str := func(k string) (string, bool) {
		v := p.Get(k)
		if v == nil || sobek.IsUndefined(v) || sobek.IsNull(v) {
			return "", false
		}
		return v.String(), true
	}
	if m, ok := str("method"); ok {
		r.method = strings.ToUpper(m)
	}
	if b, ok := str("body"); ok {
		r.body = b
	}
	if h, ok := p.Get("headers").(*sobek.Object); ok {
		for _, k := range h.Keys() {
			r.header.Set(k, h.Get(k).String())
		}
	}
	if t, ok := p.Get("tags").(*sobek.Object); ok {
		r.tags = map[string]string{}
		for _, k := range t.Keys() {
			r.tags[k] = t.Get(k).String()
		}
	}
	return r
}

// open is sse.open(url, params, setup): it connects, calls setup with the
// client, then runs the handlers for each event until the stream ends.
func (c *Client) open(call sobek.FunctionCall) sobek.Value {
	if c.vu.InInit() {
		c.throw("sse.open: connecting in the init context is not supported; call it from an exec function such as default")
	}
	params, setupArg := call.Argument(1), call.Argument(2)
	if _, isFn := sobek.AssertFunction(params); isFn && sobek.IsUndefined(setupArg) {
		params, setupArg = sobek.Undefined(), params
	}
	setup, ok := sobek.AssertFunction(setupArg)
	if !ok {
		c.throw("sse.open: the last argument must be a function that receives the client")
	}
	req := c.parse(call.Argument(0), params)
	handlers := map[string][]sobek.Callable{}
	closed := false
	client := c.rt.NewObject()
	_ = client.Set("on", func(name string, fn sobek.Callable) {
		switch name {
		case "open", "event", "error":
		default:
			c.throw("client.on: unknown event %q (open, event, error)", name)
		}
		handlers[name] = append(handlers[name], fn)
	})
	_ = client.Set("close", func() { closed = true })
	if _, err := setup(sobek.Undefined(), client); err != nil {
		panic(err)
	}
	if c.transport == nil {
		c.transport = &http.Transport{ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 100}
		c.vu.OnRunEnd(c.transport.CloseIdleConnections)
	}
	ctx, cancel := context.WithCancel(c.vu.Context())
	defer cancel()
	items := make(chan item, 64)
	start := time.Now()
	counted := &countingBody{}
	go c.read(ctx, req, items, counted)

	res := c.rt.NewObject()
	_ = res.Set("status", 0)
	_ = res.Set("error", "")
	_ = res.Set("url", req.url)
	status := 0
	fire := func(name string, arg sobek.Value) {
		for _, fn := range handlers[name] {
			if _, err := fn(sobek.Undefined(), arg); err != nil {
				cancel()
				drain(items)
				panic(err)
			}
		}
	}
	var first, prev time.Time
	tags := c.tags(req)
	c.samples = c.samples[:0]
	next := func() (item, bool) {
		select {
		case it, ok := <-items:
			return it, ok
		default:
		}
		var it item
		ok := false
		c.vu.Outside(func() { it, ok = <-items })
		return it, ok
	}
	for {
		it, more := next()
		if !more {
			break
		}
		if closed {
			continue // draining after close()
		}
		switch {
		case it.resp != nil:
			status = it.resp.StatusCode
			_ = res.Set("status", status)
			h := c.rt.NewObject()
			for k, v := range it.resp.Header {
				_ = h.Set(k, strings.Join(v, ", "))
			}
			_ = res.Set("headers", h)
			fire("open", sobek.Undefined())
		case it.event != nil:
			now := c.vu.Now()
			c.samples = append(c.samples, metrics.Sample{Metric: c.sh.events, Tags: tags, Time: now, Value: 1})
			if first.IsZero() {
				first = it.at
				c.samples = append(c.samples, metrics.Sample{Metric: c.sh.firstEvent, Tags: tags, Time: now, Value: ms(it.at.Sub(start))})
			} else {
				c.samples = append(c.samples, metrics.Sample{Metric: c.sh.interval, Tags: tags, Time: now, Value: ms(it.at.Sub(prev))})
			}
			prev = it.at
			if len(c.samples) >= 64 {
				c.vu.Emit(c.samples)
				c.samples = c.samples[:0]
			}
			ev := c.rt.NewObject()
			_ = ev.Set("id", it.event.ID)
			_ = ev.Set("name", it.event.Name)
			_ = ev.Set("data", it.event.Data)
			fire("event", ev)
		case it.err != nil:
			msg := it.err.Error()
			_ = res.Set("error", msg)
			e := c.rt.NewObject()
			_ = e.Set("error", func() string { return msg })
			fire("error", e)
		}
		if closed {
			cancel()
		}
	}
	now := c.vu.Now()
	reqTags := tags.With("status", strconv.Itoa(status))
	c.samples = append(c.samples,
		metrics.Sample{Metric: c.sh.reqs, Tags: reqTags, Time: now, Value: 1},
		metrics.Sample{Metric: c.sh.duration, Tags: reqTags, Time: now, Value: ms(time.Since(start))},
		metrics.Sample{Metric: c.sh.received, Tags: c.vu.Tags(), Time: now, Value: float64(counted.n)},
	)
	c.vu.Emit(c.samples)
	clear(c.samples)
	return res
}

func (c *Client) tags(r request) metrics.Tags {
	t := c.vu.Tags().With("method", r.method).With("url", r.url).With("name", r.url)
	for k, v := range r.tags {
		t = t.With(k, v)
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// countingBody counts the bytes read from a stream.
type countingBody struct {
	r io.Reader
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// read connects and parses the stream into items; it closes items when
// the stream ends, fails or ctx is cancelled. counted.n is final once
// items is closed.
func (c *Client) read(ctx context.Context, r request, items chan<- item, counted *countingBody) {
	defer close(items)
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, body)
	if err != nil {
		items <- item{err: err}
		return
	}
	req.Header = r.header
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "text/event-stream")
	}
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := c.transport.RoundTrip(req)
	if err != nil {
		if ctx.Err() == nil {
			items <- item{err: unwrapURL(err)}
		}
		return
	}
	defer func() { _ = resp.Body.Close() }()
	items <- item{resp: resp}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		items <- item{err: fmt.Errorf("unexpected status %s", resp.Status)}
		return
	}
	counted.r = resp.Body
	err = scanEvents(counted, func(ev Event) bool {
		select {
		case items <- item{event: &ev, at: time.Now()}:
			return true
		case <-ctx.Done():
			return false
		}
	})
	if err != nil && ctx.Err() == nil {
		items <- item{err: err}
	}
}

// scanEvents parses a text/event-stream, calling emit for each event
// until the stream ends or emit returns false: `data:` lines are joined
// with newlines, `event:` names the event, `id:` carries over to the
// events that follow, comment lines (`:`) and unknown fields are skipped,
// and a blank line ends an event that had any field.
func scanEvents(r io.Reader, emit func(Event) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var ev Event
	var data strings.Builder
	has, lines := false, 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if has {
				ev.Data = data.String()
				if !emit(ev) {
					return nil
				}
			}
			ev, has, lines = Event{ID: ev.ID}, false, 0
			data.Reset()
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if lines > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			lines++
			has = true
		case "event":
			ev.Name = value
			has = true
		case "id":
			ev.ID = value
			has = true
		}
	}
	return sc.Err()
}

// unwrapURL drops net/http's `Get "url": ` prefix from a failure.
func unwrapURL(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// drain waits for the reader to stop after its context was cancelled.
func drain(items <-chan item) {
	for range items {
	}
}
