package k6http

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/grafana/sobek"
	"github.com/tidwall/gjson"

	"github.com/kvstrand/mocker/harness/metrics"
)

// syncRequest is http.request and the verbs: send, wait, return the
// response.
func (c *Client) syncRequest(method string, urlArg, body, params sobek.Value) sobek.Value {
	opts := c.beginRequest("http." + strings.ToLower(method))
	s := c.parseSpec(method, urlArg, body, params)
	jar := s.jar
	if jar == nil {
		jar = c.vuJar()
	}
	var hops []*hop
	c.vu.Outside(func() { hops = c.do(c.vu.Context(), c.transport, jar, s) })
	return c.finish(opts, s, hops)
}

// finish emits the metrics of a request's exchanges and returns its
// response object; a failed request throws when options.throw is set.
func (c *Client) finish(opts *Options, s *spec, hops []*hop) sobek.Value {
	if c.vu.Context().Err() != nil {
		// The iteration is being stopped, and the runtime's interrupt
		// lands as soon as the script resumes: k6 records nothing for a
		// request cut short by it, and it is no error of the script's.
		return sobek.Undefined()
	}
	for _, h := range hops {
		c.emit(opts, s, h)
	}
	last := hops[len(hops)-1]
	if last.err != nil {
		msg := fmt.Sprintf("request failed: %s %s: %s (error_code %d)", s.method, s.url, last.errMsg, last.errCode)
		if opts.Throw {
			c.throw("%s", msg)
		}
		c.vu.Warn(msg)
	} else if isRedirect(last.status) && s.redirects > 0 && answered(hops) > s.redirects && last.header.Get("Location") != "" {
		c.vu.Warn(fmt.Sprintf("stopped after %d redirects and returned the redirection; pass { redirects: n } in the request params or set options.maxRedirects to silence this", s.redirects))
	}
	return c.response(s, last)
}

// answered counts the exchanges of hops that were no digest challenge.
func answered(hops []*hop) int {
	n := 0
	for _, h := range hops {
		if !h.challenge {
			n++
		}
	}
	return n
}

// emit records the samples of one exchange, with k6's tags.
func (c *Client) emit(opts *Options, s *spec, h *hop) {
	tags, dt := c.sampleTags(opts, s, h)
	now := c.vu.Now()
	m := &c.sh.m
	t := h.timings
	c.samples = append(c.samples[:0],
		metrics.Sample{Metric: m.reqs, Tags: tags, Time: now, Value: 1},
		metrics.Sample{Metric: m.duration, Tags: tags, Time: now, Value: t.duration()},
		metrics.Sample{Metric: m.blocked, Tags: tags, Time: now, Value: t.blocked},
		metrics.Sample{Metric: m.connecting, Tags: tags, Time: now, Value: t.connecting},
		metrics.Sample{Metric: m.tls, Tags: tags, Time: now, Value: t.tls},
		metrics.Sample{Metric: m.sending, Tags: tags, Time: now, Value: t.sending},
		metrics.Sample{Metric: m.waiting, Tags: tags, Time: now, Value: t.waiting},
		metrics.Sample{Metric: m.receiving, Tags: tags, Time: now, Value: t.receiving},
	)
	if s.callback != nil {
		failed := 1.0
		if expectedOK(s, h) {
			failed = 0
		}
		c.samples = append(c.samples, metrics.Sample{Metric: m.failed, Tags: tags, Time: now, Value: failed})
	}
	// data_sent and data_received carry the VU's tags only, as in k6.
	c.samples = append(c.samples,
		metrics.Sample{Metric: m.sent, Tags: dt, Time: now, Value: float64(h.sent)},
		metrics.Sample{Metric: m.received, Tags: dt, Time: now, Value: float64(h.recv)},
	)
	c.vu.Emit(c.samples)
	clear(c.samples)
}

// expectedOK reports whether the exchange h is an expected response
// (s.callback is set): a digest challenge always is.
func expectedOK(s *spec, h *hop) bool {
	return h.err == nil && (h.challenge || s.callback.match(h.status))
}

// emitKey is everything an exchange's tag set is made of when the
// request has no tags of the script's own (the name tag aside).
type emitKey struct {
	base                                   metrics.TagsID
	proto, method, url, name, errMsg, tlsV string
	status, errCode                        int
	expected                               int8 // -1: no response callback
}

// maxEmitTags bounds the cache of tag sets; it starts over when full.
const maxEmitTags = 256

// sampleTags returns the tags of an exchange's samples and those of its
// data_sent and data_received samples. A loop of requests to the same
// URL gets the same sets each time, so they are built once and cached:
// tag sets are immutable, and their identity keys the VU's.
func (c *Client) sampleTags(opts *Options, s *spec, h *hop) (tags, data metrics.Tags) {
	base := c.vu.Tags()
	if !c.haveData || c.baseID != base.ID() {
		c.dataTags = filtered(base, opts)
		c.baseID, c.haveData = base.ID(), true
	}
	name := s.name
	if h.url != s.url {
		name = h.url // a redirect's target is named by its own URL
	}
	expected := int8(-1)
	if s.callback != nil {
		expected = 0
		if expectedOK(s, h) {
			expected = 1
		}
	}
	_, named := s.tags["name"]
	cacheable := len(s.tags) == 0 || (len(s.tags) == 1 && named)
	key := emitKey{base: c.baseID, proto: h.proto, method: h.method, url: h.url, name: name,
		errMsg: h.errMsg, tlsV: h.tlsVersion, status: h.status, errCode: h.errCode, expected: expected}
	if cacheable {
		if t, ok := c.emitTags[key]; ok {
			return t, c.dataTags
		}
	}
	tags = c.dataTags
	add := func(k, v string) {
		if v != "" && opts.keepTag(k) {
			tags = tags.With(k, v)
		}
	}
	add("proto", h.proto)
	add("status", strconv.Itoa(h.status))
	add("method", h.method)
	add("url", h.url)
	add("name", name)
	if expected >= 0 {
		add("expected_response", strconv.FormatBool(expected == 1))
	}
	if h.errCode != 0 {
		add("error_code", strconv.Itoa(h.errCode))
	}
	if h.err != nil {
		add("error", h.errMsg)
	}
	add("tls_version", h.tlsVersion)
	for k, v := range s.tags {
		if k != "name" {
			tags = tags.With(k, v)
		}
	}
	if cacheable {
		if c.emitTags == nil || len(c.emitTags) >= maxEmitTags {
			c.emitTags = make(map[emitKey]metrics.Tags)
		}
		c.emitTags[key] = tags
	}
	return tags, c.dataTags
}

// filtered is t without the system tags options.systemTags leaves out.
func filtered(t metrics.Tags, opts *Options) metrics.Tags {
	for k := range t.All() {
		if !opts.keepTag(k) {
			out := map[string]string{}
			for k, v := range t.All() {
				if opts.keepTag(k) {
					out[k] = v
				}
			}
			return metrics.NewTags(out)
		}
	}
	return t
}

// response returns the JS Response of the exchange h. Its fields are
// made when the script first reads them (most scripts read two or three
// of the fifteen), and a field the script sets keeps its value.
func (c *Client) response(s *spec, h *hop) sobek.Value {
	return c.rt.NewDynamicObject(&responseObject{c: c, s: s, h: h})
}

// responseKeys are the Response's fields, in the order JSON.stringify and
// Object.keys list them.
var responseKeys = []string{
	"status", "status_text", "proto", "url", "headers", "cookies", "body", "timings",
	"error", "error_code", "tls_version", "remote_ip", "remote_port", "request", "json",
}

// responseObject backs a Response (sobek.DynamicObject).
type responseObject struct {
	c     *Client
	s     *spec
	h     *hop
	made  map[string]sobek.Value
	unset map[string]bool
}

func (r *responseObject) Get(key string) sobek.Value {
	if v, ok := r.made[key]; ok {
		return v
	}
	if r.unset[key] {
		return nil
	}
	v := r.field(key)
	if v == nil {
		return nil
	}
	switch key {
	case "headers", "cookies", "timings", "request", "json", "body":
		// objects keep their identity from one read to the next
		if r.made == nil {
			r.made = make(map[string]sobek.Value, 4)
		}
		r.made[key] = v
	}
	return v
}

func (r *responseObject) Set(key string, val sobek.Value) bool {
	if r.made == nil {
		r.made = map[string]sobek.Value{}
	}
	r.made[key] = val
	delete(r.unset, key)
	return true
}

func (r *responseObject) Has(key string) bool {
	if _, ok := r.made[key]; ok {
		return true
	}
	return !r.unset[key] && slices.Contains(responseKeys, key)
}

func (r *responseObject) Delete(key string) bool {
	delete(r.made, key)
	if r.unset == nil {
		r.unset = map[string]bool{}
	}
	r.unset[key] = true
	return true
}

func (r *responseObject) Keys() []string {
	out := make([]string, 0, len(responseKeys)+len(r.made))
	for _, k := range responseKeys {
		if !r.unset[k] && k != "json" {
			out = append(out, k)
		}
	}
	for k := range r.made {
		if !slices.Contains(responseKeys, k) {
			out = append(out, k)
		}
	}
	return out
}

// field makes one field's value; nil for a key that is no field.
func (r *responseObject) field(key string) sobek.Value {
	c, s, h, rt := r.c, r.s, r.h, r.c.rt
	switch key {
	case "status":
		return rt.ToValue(h.status)
	case "status_text":
		return rt.ToValue(h.statusText)
	case "proto":
		return rt.ToValue(h.proto)
	case "url":
		return rt.ToValue(h.url)
	case "error":
		return rt.ToValue(h.errMsg)
	case "error_code":
		return rt.ToValue(h.errCode)
	case "tls_version":
		return rt.ToValue(h.tlsVersion)
	case "remote_ip", "remote_port":
		host, p, err := net.SplitHostPort(h.remote)
		if key == "remote_ip" {
			if err != nil {
				host = ""
			}
			return rt.ToValue(host)
		}
		port, _ := strconv.Atoi(p)
		return rt.ToValue(port)
	case "headers":
		headers := rt.NewObject()
		for k, v := range h.header {
			_ = headers.Set(k, strings.Join(v, ", "))
		}
		return headers
	case "cookies":
		return c.responseCookies(h)
	case "timings":
		t := h.timings
		o := rt.NewObject()
		_ = o.Set("blocked", t.blocked)
		_ = o.Set("connecting", t.connecting)
		_ = o.Set("tls_handshaking", t.tls)
		_ = o.Set("sending", t.sending)
		_ = o.Set("waiting", t.waiting)
		_ = o.Set("receiving", t.receiving)
		_ = o.Set("duration", t.duration())
		return o
	case "body":
		switch {
		case h.err != nil:
		case s.responseType == "text":
			return rt.ToValue(string(h.body))
		case s.responseType == "binary":
			return rt.ToValue(rt.NewArrayBuffer(h.body))
		}
		return sobek.Null()
	case "request":
		return c.requestInfo(h)
	case "json":
		return rt.ToValue(func(call sobek.FunctionCall) sobek.Value { return c.parseJSON(s, h, call.Argument(0)) })
	}
	return nil
}

func (c *Client) responseCookies(h *hop) *sobek.Object {
	rt := c.rt
	cookies := rt.NewObject()
	byName := map[string][]any{}
	var order []string
	for _, ck := range h.setCookies {
		expires := int64(0)
		if !ck.Expires.IsZero() {
			expires = ck.Expires.UnixMilli()
		}
		if _, ok := byName[ck.Name]; !ok {
			order = append(order, ck.Name)
		}
		byName[ck.Name] = append(byName[ck.Name], map[string]any{
			"name": ck.Name, "value": ck.Value, "domain": ck.Domain, "path": ck.Path,
			"http_only": ck.HttpOnly, "secure": ck.Secure, "max_age": ck.MaxAge, "expires": expires,
		})
	}
	for _, n := range order {
		_ = cookies.Set(n, byName[n])
	}
	return cookies
}

func (c *Client) requestInfo(h *hop) *sobek.Object {
	rt := c.rt
	req := rt.NewObject()
	_ = req.Set("method", h.method)
	_ = req.Set("url", h.url)
	headers := rt.NewObject()
	for k, v := range h.reqHeader {
		// A copy: the values are shared with the request's spec and the
		// VU's User-Agent (exchange), and a script may write to them.
		_ = headers.Set(k, slices.Clone(v))
	}
	_ = req.Set("headers", headers)
	_ = req.Set("body", string(h.reqBody))
	cookies := rt.NewObject()
	for _, ck := range (&http.Request{Header: h.reqHeader}).Cookies() {
		_ = cookies.Set(ck.Name, []any{map[string]any{"name": ck.Name, "value": ck.Value, "replace": false}})
	}
	_ = req.Set("cookies", cookies)
	return req
}

// parseJSON is Response.json(selector?).
func (c *Client) parseJSON(s *spec, h *hop, sel sobek.Value) sobek.Value {
	rt := c.rt
	if h.err != nil || s.responseType == "none" {
		c.throw("the response has no body to parse as JSON (responseType %q%s)", s.responseType, errSuffix(h))
	}
	src := string(h.body)
	if !sobek.IsUndefined(sel) {
		res := gjson.Get(src, sel.String())
		if !res.Exists() {
			return sobek.Undefined()
		}
		src = res.Raw
	}
	jsonParse, _ := sobek.AssertFunction(rt.Get("JSON").ToObject(rt).Get("parse"))
	parsed, err := jsonParse(sobek.Undefined(), rt.ToValue(src))
	if err != nil {
		c.throw("cannot parse the response body as JSON: %v", err)
	}
	return parsed
}

func errSuffix(h *hop) string {
	if h.err != nil {
		return ", error " + h.errMsg
	}
	return ""
}

// batch is http.batch: the requests run concurrently (at most
// options.batch at once, options.batchPerHost per host) and the
// responses come back in the shape the requests went in (array or
// object).
func (c *Client) batch(call sobek.FunctionCall) sobek.Value {
	opts := c.beginRequest("http.batch")
	arg, ok := call.Argument(0).(*sobek.Object)
	if !ok {
		c.throw("http.batch: want an array or object of requests, got %s", call.Argument(0).String())
	}
	keys := arg.Keys()
	isArray := arg.ClassName() == "Array"
	specs := make([]*spec, len(keys))
	for i, k := range keys {
		specs[i] = c.batchItem(arg.Get(k), k)
	}
	results := make([][]*hop, len(specs))
	limit := opts.Batch
	if limit <= 0 {
		limit = len(specs)
	}
	sem := make(chan struct{}, max(limit, 1))
	hostSems := map[string]chan struct{}{}
	var wg sync.WaitGroup
	ctx := c.vu.Context()
	for i, s := range specs {
		jar := s.jar
		if jar == nil {
			jar = c.vuJar()
		}
		var hostSem chan struct{}
		if opts.BatchPerHost > 0 {
			host := hostOf(s.url)
			if hostSems[host] == nil {
				hostSems[host] = make(chan struct{}, opts.BatchPerHost)
			}
			hostSem = hostSems[host]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if hostSem != nil {
				hostSem <- struct{}{}
				defer func() { <-hostSem }()
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = c.do(ctx, c.transport, jar, s)
		}()
	}
	c.vu.Outside(wg.Wait)
	if isArray {
		out := make([]any, len(specs))
		for i, s := range specs {
			out[i] = c.finish(opts, s, results[i])
		}
		return c.rt.ToValue(out)
	}
	out := c.rt.NewObject()
	for i, s := range specs {
		_ = out.Set(keys[i], c.finish(opts, s, results[i]))
	}
	return out
}

func hostOf(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		raw = raw[i+3:]
	}
	if i := strings.IndexAny(raw, "/?#"); i >= 0 {
		raw = raw[:i]
	}
	return raw
}

// batchItem reads one http.batch entry: a URL, [method, url, body,
// params] or {method, url, body, params}.
func (c *Client) batchItem(v sobek.Value, key string) *spec {
	obj, ok := v.(*sobek.Object)
	if !ok {
		return c.parseSpec(http.MethodGet, v, sobek.Undefined(), sobek.Undefined())
	}
	if obj.ClassName() == "Array" {
		at := func(i int) sobek.Value {
			e := obj.Get(strconv.Itoa(i))
			if e == nil {
				return sobek.Undefined()
			}
			return e
		}
		return c.parseSpec(at(0).String(), at(1), at(2), at(3))
	}
	field := func(k string) sobek.Value {
		e := obj.Get(k)
		if e == nil {
			return sobek.Undefined()
		}
		return e
	}
	if sobek.IsUndefined(field("url")) {
		c.throw("http.batch: request %s has no url", key)
	}
	method := http.MethodGet
	if m := field("method"); !sobek.IsUndefined(m) {
		method = m.String()
	}
	if _, isTagged := field("url").(*sobek.Object); !isTagged && sobek.IsUndefined(field("method")) && obj.Get("name") != nil {
		// An http.url`` object given directly as the request.
		return c.parseSpec(method, obj, sobek.Undefined(), sobek.Undefined())
	}
	return c.parseSpec(method, field("url"), field("body"), field("params"))
}

// asyncRequest is http.asyncRequest: it returns a promise settled on the
// VU's event loop once the response is in.
func (c *Client) asyncRequest(call sobek.FunctionCall) sobek.Value {
	opts := c.beginRequest("http.asyncRequest")
	s := c.parseSpec(call.Argument(0).String(), call.Argument(1), call.Argument(2), call.Argument(3))
	jar := s.jar
	if jar == nil {
		jar = c.vuJar()
	}
	p, resolve, reject := c.rt.NewPromise()
	done := c.vu.RegisterCallback()
	ctx, transport := c.vu.Context(), c.transport
	go func() {
		hops := c.do(ctx, transport, jar, s)
		done(func() error {
			var res sobek.Value
			err := func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						if ex, ok := r.(*sobek.Object); ok {
							err = reject(ex)
							return
						}
						panic(r)
					}
				}()
				res = c.finish(opts, s, hops)
				return nil
			}()
			if err != nil || res == nil {
				return err
			}
			return resolve(res)
		})
	}()
	return c.rt.ToValue(p)
}
