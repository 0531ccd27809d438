package k6http

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grafana/sobek"
)

// defaultTimeout is k6's request timeout.
const defaultTimeout = 60 * time.Second

// spec is one request as the script described it, converted on the VU
// goroutine so that it can be sent from any other.
type spec struct {
	method, url  string
	name         string // the name tag
	body         []byte
	header       http.Header
	tags         map[string]string
	timeout      time.Duration
	responseType string
	redirects    int
	jar          *cookiejar.Jar
	cookies      map[string]cookieParam
	callback     *expected
	user, pass   string
	hasAuth      bool
	digest       bool // params.auth 'digest': the credentials answer a challenge
}

type cookieParam struct {
	value   string
	replace bool
}

// hop is one HTTP exchange of a request (a request that follows
// redirects makes several), as measured.
type hop struct {
	method, url string
	reqHeader   http.Header
	reqBody     []byte
	status      int
	statusText  string
	proto       string
	header      http.Header
	body        []byte
	err         error
	errCode     int
	errMsg      string
	tlsVersion  string
	remote      string
	timings     timings
	sent, recv  int64
	setCookies  []*http.Cookie
	challenge   bool // a digest challenge (401): expected, as k6 has it
}

// timings are k6's phases of one exchange, in milliseconds.
type timings struct {
	blocked, connecting, tls, sending, waiting, receiving float64
}

func (t timings) duration() float64 { return t.sending + t.waiting + t.receiving }

// parseSpec reads a request's arguments; it throws on a malformed one.
func (c *Client) parseSpec(method string, urlArg, body, params sobek.Value) *spec {
	opts, err := c.sh.options()
	if err != nil {
		c.throw("%v", err)
	}
	s := &spec{method: strings.ToUpper(method), header: http.Header{}, timeout: defaultTimeout,
		responseType: "text", redirects: opts.MaxRedirects, callback: c.callback}
	if opts.DiscardResponseBodies {
		s.responseType = "none"
	}
	s.url, s.name = c.urlOf(urlArg)
	// Only a URL with an @ can carry credentials: the others skip a parse.
	if strings.Contains(s.url, "@") {
		if u, perr := url.Parse(s.url); perr == nil && u.User != nil {
			s.user = u.User.Username()
			s.pass, _ = u.User.Password()
			s.hasAuth = true
			u.User = nil
			s.url = u.String()
			if s.name == "" || strings.Contains(s.name, "@") {
				s.name = s.url
			}
		}
	}
	if s.name == "" {
		s.name = s.url
	}
	var compression []string
	if p, ok := params.(*sobek.Object); ok {
		compression = c.parseParams(s, p)
	}
	c.setBody(s, body)
	if len(compression) > 0 && len(s.body) > 0 {
		s.body = compressBody(s.body, compression)
		s.header.Set("Content-Encoding", strings.Join(compression, ", "))
	}
	if opts.UserAgent != "" && s.header.Get("User-Agent") == "" {
		// One shared slice, never changed: a request's header map holds
		// it as it holds the script's values.
		if c.userAgent == nil || c.userAgent[0] != opts.UserAgent {
			c.userAgent = []string{opts.UserAgent}
		}
		s.header["User-Agent"] = c.userAgent
	}
	return s
}

// urlOf returns a URL argument's text and name tag: a string, an
// object from the http.url template tag (named by its template) or anything
// with toString.
func (c *Client) urlOf(v sobek.Value) (string, string) {
	if obj, ok := v.(*sobek.Object); ok {
		if u, n := obj.Get("url"), obj.Get("name"); u != nil && n != nil && !sobek.IsUndefined(u) {
			return u.String(), n.String()
		}
	}
	if v == nil || sobek.IsUndefined(v) || sobek.IsNull(v) {
		c.throw("http: a request needs a URL")
	}
	return v.String(), ""
}

// parseParams reads params into s and returns the requested body
// compression.
func (c *Client) parseParams(s *spec, p *sobek.Object) []string {
	get := func(k string) sobek.Value {
		v := p.Get(k)
		if v == nil || sobek.IsUndefined(v) {
			return nil
		}
		return v
	}
	if h, ok := get("headers").(*sobek.Object); ok {
		for _, k := range h.Keys() {
			s.header.Set(k, h.Get(k).String())
		}
	}
	if t, ok := get("tags").(*sobek.Object); ok {
		s.tags = make(map[string]string, len(t.Keys()))
		for _, k := range t.Keys() {
			s.tags[k] = t.Get(k).String()
		}
		if n, ok := s.tags["name"]; ok {
			s.name = n
		}
	}
	if v := get("timeout"); v != nil {
		s.timeout = c.durationOf(v, "params.timeout")
	}
	if v := get("responseType"); v != nil {
		switch rt := v.String(); rt {
		case "text", "binary", "none":
			s.responseType = rt
		default:
			c.throw("params.responseType: %q is not one of text, binary, none", rt)
		}
	}
	if v := get("redirects"); v != nil {
		n := v.ToInteger()
		if n < 0 {
			c.throw("params.redirects: %d is negative", n)
		}
		s.redirects = int(n)
	}
	if v := get("auth"); v != nil {
		switch a := v.String(); a {
		case "basic":
		case "digest":
			s.digest = true
		default:
			c.throw("params.auth: %q is not supported; \"basic\" and \"digest\" (credentials in the URL) are", a)
		}
	}
	if v := get("jar"); v != nil && !sobek.IsNull(v) {
		s.jar = c.jarOf(v)
	}
	if ck, ok := get("cookies").(*sobek.Object); ok {
		s.cookies = map[string]cookieParam{}
		for _, k := range ck.Keys() {
			v := ck.Get(k)
			if o, ok := v.(*sobek.Object); ok {
				cp := cookieParam{value: o.Get("value").String()}
				if r := o.Get("replace"); r != nil {
					cp.replace = r.ToBoolean()
				}
				s.cookies[k] = cp
				continue
			}
			s.cookies[k] = cookieParam{value: v.String()}
		}
	}
	if v := p.Get("responseCallback"); v != nil && !sobek.IsUndefined(v) {
		s.callback = c.toCallback(v, "params.responseCallback")
	}
	if v := get("compression"); v != nil {
		algos, err := parseCompression(v.String())
		if err != nil {
			c.throw("params.compression: %v", err)
		}
		return algos
	}
	return nil
}

// durationOf reads a timeout: a number of milliseconds or a Go-style
// duration string ("30s").
func (c *Client) durationOf(v sobek.Value, what string) time.Duration {
	if s, ok := v.Export().(string); ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			c.throw("%s: %q is not a duration such as \"30s\": %v", what, s, err)
		}
		return d
	}
	ms := v.ToFloat()
	if ms < 0 {
		c.throw("%s: %v is negative", what, ms)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// setBody converts the body: a string or ArrayBuffer is sent as is, an
// object is form-encoded (multipart when it holds http.file() values).
func (c *Client) setBody(s *spec, body sobek.Value) {
	if body == nil || sobek.IsUndefined(body) || sobek.IsNull(body) {
		return
	}
	obj, isObj := body.(*sobek.Object)
	if !isObj {
		s.body = bytesOf(body)
		return
	}
	switch body.Export().(type) {
	case sobek.ArrayBuffer, []byte:
		s.body = bytesOf(body)
		return
	}
	keys := obj.Keys()
	sort.Strings(keys)
	multi := false
	for _, k := range keys {
		if _, ok := obj.Get(k).Export().(*fileData); ok {
			multi = true
		}
	}
	if !multi {
		form := url.Values{}
		for _, k := range keys {
			form.Set(k, obj.Get(k).String())
		}
		s.body = []byte(form.Encode())
		if s.header.Get("Content-Type") == "" {
			s.header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		return
	}
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, k := range keys {
		v := obj.Get(k)
		if f, ok := v.Export().(*fileData); ok {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, k, f.Filename))
			h.Set("Content-Type", f.ContentType)
			part, _ := w.CreatePart(h)
			_, _ = part.Write(f.Data)
			continue
		}
		_ = w.WriteField(k, v.String())
	}
	_ = w.Close()
	s.body = buf.Bytes()
	s.header.Set("Content-Type", w.FormDataContentType())
}

// beginRequest readies the VU's client for a request: on the first of an
// iteration it resets the cookies and, with noVUConnectionReuse, closes
// the idle connections.
func (c *Client) beginRequest(what string) *Options {
	if c.vu.InInit() {
		c.throw("%s: making requests in the init context is not supported; call it from setup(), an exec function such as default, or teardown()", what)
	}
	opts, err := c.sh.options()
	if err != nil {
		c.throw("%v", err)
	}
	if c.transport == nil {
		dial := dialer(opts)
		tr := newTransport(opts, dial)
		c.transport = tr
		c.conns = &conns{dial: dial}
		c.direct = !opts.NoConnectionReuse
		c.vu.OnRunEnd(tr.CloseIdleConnections)
		c.vu.OnRunEnd(c.conns.closeIdle)
	}
	if it := c.vu.Iteration(); !c.started || it != c.iter {
		if c.started {
			// A jar nothing stored a cookie in, and the script never
			// saw, is as good as a new one: it is kept.
			if !opts.NoCookiesReset && c.jarUsed.Swap(false) {
				c.jar = nil
			}
			if opts.NoVUConnectionReuse {
				c.transport.CloseIdleConnections()
				c.conns.closeIdle()
			}
		}
		c.started, c.iter = true, it
	}
	return opts
}

// newTransport is a VU's transport: keep-alive unless noConnectionReuse,
// dialling with dial.
func newTransport(o *Options, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		DialContext:       dial,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: o.InsecureSkipTLSVerify}, //nolint:gosec // the script asked for it (options.insecureSkipTLSVerify)
		ForceAttemptHTTP2: true,
		// As k6's: no Accept-Encoding the script did not set, and a body
		// decoded by its Content-Encoding whatever was asked (exchange).
		DisableCompression:  true,
		DisableKeepAlives:   o.NoConnectionReuse,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: maxIdlePerHost,
		IdleConnTimeout:     idleTimeout,
	}
}

// dialer dials through options.hosts and counts the bytes on the wire.
func dialer(o *Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	hosts := o.Hosts
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to, ok := hosts[addr]; ok {
			addr = to
		} else if host, port, err := net.SplitHostPort(addr); err == nil {
			if to, ok := hosts[host]; ok {
				if _, _, err := net.SplitHostPort(to); err == nil {
					addr = to
				} else {
					addr = net.JoinHostPort(to, port)
				}
			}
		}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: conn, remote: conn.RemoteAddr().String()}, nil
	}
}

// countingConn counts the bytes a connection carries (TLS included), for
// data_sent and data_received.
type countingConn struct {
	net.Conn
	sent, recv atomic.Int64
	remote     string // the peer's address, formatted once
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.recv.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	return n, err
}

func connCounter(conn net.Conn) *countingConn {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	cc, _ := conn.(*countingConn)
	return cc
}

// tracer records one exchange's phases on the wall clock.
type tracer struct {
	mu                                sync.Mutex
	start, connStart, connDone        time.Time
	tlsStart, tlsDone, gotConn, wrote time.Time
	firstByte                         time.Time
	conn                              *countingConn
	sent0, recv0                      int64
	remote                            string
}

func (tr *tracer) trace() *httptrace.ClientTrace {
	now := func(dst *time.Time) {
		tr.mu.Lock()
		*dst = time.Now()
		tr.mu.Unlock()
	}
	return &httptrace.ClientTrace{
		ConnectStart: func(string, string) {
			tr.mu.Lock()
			if tr.connStart.IsZero() {
				tr.connStart = time.Now()
			}
			tr.mu.Unlock()
		},
		ConnectDone:       func(string, string, error) { now(&tr.connDone) },
		TLSHandshakeStart: func() { now(&tr.tlsStart) },
		TLSHandshakeDone:  func(tls.ConnectionState, error) { now(&tr.tlsDone) },
		GotConn: func(info httptrace.GotConnInfo) {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			tr.gotConn = time.Now()
			if cc := connCounter(info.Conn); cc != nil {
				tr.conn = cc
				tr.remote = cc.remote
				if info.Reused {
					tr.sent0, tr.recv0 = cc.sent.Load(), cc.recv.Load()
				}
			} else {
				tr.remote = info.Conn.RemoteAddr().String()
			}
		},
		WroteRequest:         func(httptrace.WroteRequestInfo) { now(&tr.wrote) },
		GotFirstResponseByte: func() { now(&tr.firstByte) },
	}
}

func ms(d time.Duration) float64 {
	if d < 0 {
		return 0
	}
	return float64(d) / float64(time.Millisecond)
}

// phases turns the recorded times into k6's timings; end is when the
// body was read.
func (tr *tracer) phases(end time.Time) timings {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var t timings
	if tr.gotConn.IsZero() {
		return t
	}
	blockedEnd := tr.gotConn
	if !tr.connStart.IsZero() {
		blockedEnd = tr.connStart
		t.connecting = ms(tr.connDone.Sub(tr.connStart))
	}
	t.blocked = ms(blockedEnd.Sub(tr.start))
	if !tr.tlsStart.IsZero() {
		t.tls = ms(tr.tlsDone.Sub(tr.tlsStart))
	}
	wrote := tr.wrote
	if wrote.IsZero() {
		wrote = tr.gotConn
	}
	t.sending = ms(wrote.Sub(tr.gotConn))
	first := tr.firstByte
	if first.IsZero() {
		first = end
	}
	t.waiting = ms(first.Sub(wrote))
	t.receiving = ms(end.Sub(first))
	return t
}

// do sends s, following redirects, and returns every exchange. It runs
// on any goroutine and touches no JS.
func (c *Client) do(ctx context.Context, transport *http.Transport, jar *cookiejar.Jar, s *spec) []*hop {
	b := &budget{parent: ctx}
	if s.timeout > 0 {
		b.deadline = time.Now().Add(s.timeout)
	}
	defer b.done()
	method, target, body := s.method, s.url, s.body
	var hops []*hop
	challenges := 0 // digest challenges among hops
	for {
		h := c.exchange(b, transport, jar, s, method, target, body, "")
		if s.digest && s.hasAuth && h.err == nil && h.status == http.StatusUnauthorized {
			// As k6 does: the challenge is one request, expected to be
			// answered 401, and the answer another.
			if answer := c.answerDigest(b, transport, jar, s, method, target, body, h); answer != nil {
				h.challenge = true
				hops = append(hops, h)
				challenges++
				h = answer
			}
		}
		hops = append(hops, h)
		if h.err != nil || !isRedirect(h.status) {
			return hops
		}
		loc := h.header.Get("Location")
		if loc == "" {
			return hops
		}
		if len(hops)-challenges > s.redirects {
			return hops
		}
		base, _ := url.Parse(target)
		next, err := base.Parse(loc)
		if err != nil {
			return hops
		}
		target = next.String()
		switch h.status {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther:
			// As browsers (and Go's client, and k6) do: the next request
			// is a GET without the body; 307 and 308 repeat the request.
			if method != http.MethodHead {
				method = http.MethodGet
			}
			body = nil
		}
	}
}

// answerDigest repeats a request that drew the 401 challenge ch with
// the credentials' answer to it; nil when ch offers no digest challenge.
func (c *Client) answerDigest(b *budget, transport *http.Transport, jar *cookiejar.Jar, s *spec, method, target string, body []byte, ch *hop) *hop {
	// A server may offer several schemes, one header each (Basic first,
	// say): answer the digest one.
	var challenge digestChallenge
	ok := false
	for _, h := range ch.header.Values("WWW-Authenticate") {
		if challenge, ok = parseDigestChallenge(h); ok {
			break
		}
	}
	u, err := url.Parse(target)
	if !ok || err != nil {
		return nil
	}
	auth, err := challenge.authorization(s.user, s.pass, method, u.RequestURI())
	if err != nil {
		return &hop{method: method, url: target, reqBody: body, err: err, errCode: codeGeneric, errMsg: err.Error()}
	}
	return c.exchange(b, transport, jar, s, method, target, body, auth)
}

func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// exchange makes one HTTP exchange and reads the response body.
func (c *Client) exchange(b *budget, transport *http.Transport, jar *cookiejar.Jar, s *spec, method, target string, body []byte, auth string) *hop {
	h := &hop{method: method, url: target, reqBody: body}
	tr := &tracer{start: time.Now()}
	viaTransport := false
	fail := func(err error) *hop {
		if viaTransport {
			if cause := context.Cause(b.context()); errors.Is(cause, errTimeout) {
				err = errTimeout
			}
		} else if e := b.cut(); e != nil {
			err = e
		}
		h.err = err
		h.errCode, h.errMsg = classify(err)
		h.timings = tr.phases(time.Now())
		if tr.conn != nil {
			h.sent, h.recv = tr.conn.sent.Load()-tr.sent0, tr.conn.recv.Load()-tr.recv0
		}
		return h
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(b.parent, method, target, rd)
	if err != nil {
		h.err = err
		h.errCode, h.errMsg = codeInvalidURL, err.Error()
		return h
	}
	if req.URL.Host == "" || (req.URL.Scheme != "http" && req.URL.Scheme != "https") {
		h.err = fmt.Errorf("invalid URL %q: want an absolute http:// or https:// URL", target)
		h.errCode, h.errMsg = codeInvalidURL, h.err.Error()
		return h
	}
	// The values are shared with s.header: nothing appends to them (the
	// cookie and auth headers below are set, not appended to) and the
	// transport only reads them.
	for k, v := range s.header {
		req.Header[k] = v
	}
	if host := req.Header.Get("Host"); host != "" {
		req.Host = host
	}
	switch {
	case auth != "":
		req.Header.Set("Authorization", auth)
	case s.hasAuth && !s.digest:
		req.SetBasicAuth(s.user, s.pass)
	}
	if jar != nil {
		for _, ck := range jar.Cookies(req.URL) {
			if cp, ok := s.cookies[ck.Name]; !ok || !cp.replace {
				req.AddCookie(ck)
			}
		}
	}
	if len(s.cookies) > 0 {
		names := make([]string, 0, len(s.cookies))
		for name := range s.cookies {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			req.AddCookie(&http.Cookie{Name: name, Value: s.cookies[name].value})
		}
	}
	// RoundTrip does not change the request: its header is the one sent.
	h.reqHeader = req.Header
	var resp *http.Response
	var dc *directConn
	if c.direct && direct(req) {
		resp, dc, err = c.roundTripDirect(b, req, tr)
	} else {
		viaTransport = true
		req = req.WithContext(httptrace.WithClientTrace(b.context(), tr.trace()))
		resp, err = transport.RoundTrip(req)
	}
	if err != nil {
		return fail(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if s.responseType == "none" {
		_, err = io.Copy(io.Discard, resp.Body)
	} else {
		h.body, err = readBody(resp.Body, resp.ContentLength)
	}
	end := time.Now()
	if dc != nil {
		c.release(dc, req, resp, err)
	}
	h.status = resp.StatusCode
	h.statusText = resp.Status
	h.proto = resp.Proto
	h.header = resp.Header
	h.remote = tr.remote
	if resp.TLS != nil {
		h.tlsVersion = tlsName(resp.TLS.Version)
	}
	h.setCookies = resp.Cookies()
	if jar != nil && len(h.setCookies) > 0 {
		c.jarUsed.Store(true)
		jar.SetCookies(req.URL, h.setCookies)
	}
	if err != nil {
		hh := fail(err)
		hh.status = 0
		return hh
	}
	h.errCode = statusCode(h.status)
	// A body in the codings its Content-Encoding lists is decoded here,
	// as k6 does (the transport asks for none and decodes none).
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && s.responseType != "none" {
		if h.body, err = decodeBody(h.body, ce); err != nil {
			h.err = err
			h.errCode, h.errMsg = codeDecompression, err.Error()
		}
	}
	h.timings = tr.phases(end)
	if tr.conn != nil {
		h.sent, h.recv = tr.conn.sent.Load()-tr.sent0, tr.conn.recv.Load()-tr.recv0
	}
	return h
}

// readBody reads a response body to its end, in one allocation when the
// server said how long it is (io.ReadAll grows its buffer step by step).
func readBody(r io.Reader, length int64) ([]byte, error) {
	if length < 0 || length > maxPresized {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, length+1) // +1: the read that sees the end fits
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) { // longer than announced
			b = append(b, 0)[:len(b)]
		}
	}
}

// maxPresized bounds the buffer readBody allocates up front on the
// server's word.
const maxPresized = 16 << 20

func tlsName(v uint16) string {
	switch v {
	case tls.VersionTLS10:
		return "tls1.0"
	case tls.VersionTLS11:
		return "tls1.1"
	case tls.VersionTLS12:
		return "tls1.2"
	case tls.VersionTLS13:
		return "tls1.3"
	}
	return ""
}
