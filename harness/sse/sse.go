package sse

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
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
	var on handlers
	closed := false
	client := c.rt.NewObject()
	_ = client.Set("on", func(name string, fn sobek.Callable) {
		list := on.named(name)
		if list == nil {
			c.throw("client.on: unknown event %q (open, event, error)", name)
		}
		*list = append(*list, fn)
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
	start := time.Now()

	res := c.rt.NewObject()
	_ = res.Set("status", 0)
	_ = res.Set("error", "")
	_ = res.Set("url", req.url)
	fail := func(err error) {
		msg := err.Error()
		_ = res.Set("error", msg)
		e := c.rt.NewObject()
		_ = e.Set("error", func() string { return msg })
		fire(on.error, e)
	}
	tags := c.tags(req)
	c.samples = c.samples[:0]
	counted := &countingBody{}
	status := 0

	// The stream is read on the VU's goroutine, one event at a time,
	// between the handlers' calls: no goroutine hands events over, and
	// a handler's close() stops the reading at once. Each wait on the
	// socket is an Outside wait (script time on a paced clock).
	var resp *http.Response
	var err error
	c.vu.Outside(func() { resp, err = c.connect(ctx, req) }) //nolint:bodyclose // closed below, once the stream is over
	switch {
	case err != nil:
		if ctx.Err() == nil {
			fail(err)
		}
	default:
		defer func() { _ = resp.Body.Close() }()
		status = resp.StatusCode
		_ = res.Set("status", status)
		h := c.rt.NewObject()
		for k, v := range resp.Header {
			_ = h.Set(k, strings.Join(v, ", "))
		}
		_ = res.Set("headers", h)
		fire(on.open, sobek.Undefined())
		if closed {
			break
		}
		if status < 200 || status > 299 {
			c.vu.Outside(func() { _, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) })
			fail(fmt.Errorf("unexpected status %s", resp.Status))
			break
		}
		counted.r = resp.Body
		c.stream(ctx, newEventReader(counted), tags, start, &on, fail, &closed)
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

// handlers are a stream's handlers, by the event they run on; a handler
// may add others, which run from the next event on.
type handlers struct{ open, event, error []sobek.Callable }

// named is the list of the handlers of the event name; nil for a name
// the client has no event of.
func (h *handlers) named(name string) *[]sobek.Callable {
	switch name {
	case "open":
		return &h.open
	case "event":
		return &h.event
	case "error":
		return &h.error
	}
	return nil
}

// fire runs the handlers in list with arg, one after the other; a
// handler's exception ends the stream (and the iteration).
func fire(list []sobek.Callable, arg sobek.Value) {
	for _, fn := range list {
		if _, err := fn(sobek.Undefined(), arg); err != nil {
			panic(err)
		}
	}
}

// emitEvery is how many event samples a VU gathers before it hands
// them to the collector.
const emitEvery = 64

// stream runs the event handlers for each event of er until the stream
// ends, fails or a handler calls close() (*closed).
func (c *Client) stream(ctx context.Context, er *eventReader, tags metrics.Tags, start time.Time,
	on *handlers, fail func(error), closed *bool,
) {
	var (
		ev    Event
		more  bool
		err   error
		at    time.Time
		first = true
		prev  time.Time
	)
	read := func() { // made once: the loop makes no closure per event
		more, err = er.next(&ev)
		at = time.Now()
	}
	for !*closed {
		c.vu.Outside(read)
		if !more {
			if err != nil && ctx.Err() == nil {
				fail(err)
			}
			return
		}
		now := c.vu.Now()
		c.samples = append(c.samples, metrics.Sample{Metric: c.sh.events, Tags: tags, Time: now, Value: 1})
		if first {
			first = false
			c.samples = append(c.samples, metrics.Sample{Metric: c.sh.firstEvent, Tags: tags, Time: now, Value: ms(at.Sub(start))})
		} else {
			c.samples = append(c.samples, metrics.Sample{Metric: c.sh.interval, Tags: tags, Time: now, Value: ms(at.Sub(prev))})
		}
		prev = at
		if len(c.samples) >= emitEvery {
			c.vu.Emit(c.samples)
			c.samples = c.samples[:0]
		}
		fire(on.event, c.rt.NewDynamicObject(&eventObject{c: c, ev: ev}))
	}
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

// connect sends the request and returns the response, whatever its
// status.
func (c *Client) connect(ctx context.Context, r request) (*http.Response, error) {
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, body)
	if err != nil {
		return nil, err
	}
	req.Header = r.header
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "text/event-stream")
	}
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := c.transport.RoundTrip(req)
	if err != nil {
		return nil, unwrapURL(err)
	}
	return resp, nil
}

// maxLine bounds one line of a stream (a longer one fails the stream):
// a server that never sends a newline must not grow the buffer forever.
const maxLine = 16 << 20

// errLineTooLong fails a stream with a line longer than maxLine.
var errLineTooLong = fmt.Errorf("a line of the event stream is longer than %d bytes", maxLine)

// eventReader parses a text/event-stream: `data:` lines are joined with
// newlines, `event:` names the event, `id:` carries over to the events
// that follow, comment lines (`:`) and unknown fields are skipped, and a
// blank line ends an event that had any field. Lines end with LF or
// CRLF. It reads lines in place from its buffer and makes strings only
// of the values an event hands out.
type eventReader struct {
	br   *bufio.Reader
	id   string // the last event ID, carried over
	long []byte // a line longer than the buffer, put together
	data []byte // data lines after the first, joined
}

func newEventReader(r io.Reader) *eventReader {
	return &eventReader{br: bufio.NewReaderSize(r, 8<<10)}
}

// line returns the next line without its end; it is valid until the
// next call. At the end of the stream it returns io.EOF (an unfinished
// last line is dropped, as an unfinished event is).
func (e *eventReader) line() ([]byte, error) {
	b, err := e.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		e.long = append(e.long[:0], b...)
		for errors.Is(err, bufio.ErrBufferFull) {
			b, err = e.br.ReadSlice('\n')
			e.long = append(e.long, b...)
			if len(e.long) > maxLine {
				return nil, errLineTooLong
			}
		}
		b = e.long
	}
	if err != nil {
		return nil, err
	}
	b = b[:len(b)-1]
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b, nil
}

// next reads the next event into ev; false at the end of the stream,
// with the error that ended it (nil for a clean end).
func (e *eventReader) next(ev *Event) (bool, error) {
	*ev = Event{}
	has, lines := false, 0
	e.data = e.data[:0]
	for {
		line, err := e.line()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return false, err
		}
		if len(line) == 0 {
			if !has {
				continue
			}
			ev.ID = e.id
			if lines > 0 {
				ev.Data = string(e.data)
			}
			return true, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if lines > 0 {
				e.data = append(e.data, '\n')
			}
			e.data = append(e.data, value...)
			lines++
			has = true
		case "event":
			ev.Name = string(value)
			has = true
		case "id":
			if string(value) != e.id {
				e.id = string(value)
			}
			has = true
		}
	}
}

// unwrapURL drops net/http's `Get "url": ` prefix from a failure.
func unwrapURL(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// eventObject is an event as the handlers see it ({id, name, data}): its
// strings become JavaScript values only when read, and a property the
// script sets is kept.
type eventObject struct {
	c     *Client
	ev    Event
	own   map[string]sobek.Value
	unset map[string]bool
}

var eventKeys = []string{"id", "name", "data"}

func (o *eventObject) Get(key string) sobek.Value {
	if v, ok := o.own[key]; ok {
		return v
	}
	if o.unset[key] {
		return nil
	}
	switch key {
	case "id":
		return o.c.rt.ToValue(o.ev.ID)
	case "name":
		return o.c.rt.ToValue(o.ev.Name)
	case "data":
		return o.c.rt.ToValue(o.ev.Data)
	}
	return nil
}

func (o *eventObject) Set(key string, val sobek.Value) bool {
	if o.own == nil {
		o.own = map[string]sobek.Value{}
	}
	o.own[key] = val
	delete(o.unset, key)
	return true
}

func (o *eventObject) Has(key string) bool {
	if _, ok := o.own[key]; ok {
		return true
	}
	return !o.unset[key] && slices.Contains(eventKeys, key)
}

func (o *eventObject) Delete(key string) bool {
	delete(o.own, key)
	if o.unset == nil {
		o.unset = map[string]bool{}
	}
	o.unset[key] = true
	return true
}

func (o *eventObject) Keys() []string {
	out := make([]string, 0, len(eventKeys)+len(o.own))
	for _, k := range eventKeys {
		if !o.unset[k] {
			out = append(out, k)
		}
	}
	extra := make([]string, 0, len(o.own))
	for k := range o.own {
		if !slices.Contains(eventKeys, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}
