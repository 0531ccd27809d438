package harness

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"crypto/md5" //nolint:gosec // the digest scheme's hash
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// newTestHTTPServer is the local server the k6/http tests and the HTTP
// k6compat scripts talk to. Routes:
//
//	/status/N           answers status N
//	/redirect/N         redirects N times (302) and then answers 200
//	/redirect307        redirects once with 307 (the method and body are kept)
//	/slow               answers only when the client gives up (or after 10 s)
//	/delay/MS           answers after MS milliseconds
//	/concurrent/K       holds each request 50 ms, counting those in flight under K
//	/concurrent-peak/K  the most requests that were in flight at once under K
//	/cookies/set?k=v    sets the cookies given in the query
//	/cookies            echoes the request's cookies as JSON
//	/echo               echoes method, headers, body and form as JSON
//	/json               a fixed JSON document
//	/gzip               a gzip-encoded body
//	/bytes/N            N bytes of 'x'
//	/basic-auth/U/P     200 when basic auth is U:P, 401 otherwise
func newTestHTTPServer(t testing.TB) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	var inflight sync.Map // key → *[2]atomic.Int64 (now, peak)
	counter := func(key string) *[2]atomic.Int64 {
		c, _ := inflight.LoadOrStore(key, new([2]atomic.Int64))
		return c.(*[2]atomic.Int64)
	}
	mux.HandleFunc("/concurrent/{key}", func(w http.ResponseWriter, r *http.Request) {
		c := counter(r.PathValue("key"))
		now := c[0].Add(1)
		for peak := c[1].Load(); now > peak && !c[1].CompareAndSwap(peak, now); peak = c[1].Load() {
		}
		defer c[0].Add(-1)
		select {
		case <-r.Context().Done():
		case <-time.After(50 * time.Millisecond):
		}
	})
	mux.HandleFunc("/concurrent-peak/{key}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strconv.FormatInt(counter(r.PathValue("key"))[1].Load(), 10))
	})
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(r.PathValue("code"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(code)
	})
	mux.HandleFunc("/redirect/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		if n <= 0 {
			_, _ = io.WriteString(w, "arrived")
			return
		}
		http.Redirect(w, r, "/redirect/"+strconv.Itoa(n-1), http.StatusFound)
	})
	mux.HandleFunc("/redirect307", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/echo", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	mux.HandleFunc("/delay/{ms}", func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.PathValue("ms"))
		select {
		case <-r.Context().Done():
		case <-time.After(time.Duration(ms) * time.Millisecond):
			_, _ = io.WriteString(w, "waited")
		}
	})
	mux.HandleFunc("/cookies/set", func(w http.ResponseWriter, r *http.Request) {
		for k, v := range r.URL.Query() {
			http.SetCookie(w, &http.Cookie{Name: k, Value: v[0], Path: "/"})
		}
		_, _ = io.WriteString(w, "set")
	})
	mux.HandleFunc("/cookies", func(w http.ResponseWriter, r *http.Request) {
		out := map[string]string{}
		for _, c := range r.Cookies() {
			out[c.Name] = c.Value
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"cookies": out})
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if ce := r.Header.Get("Content-Encoding"); ce != "" {
			if plain, err := decodeCodings(body, ce); err == nil {
				body = plain
			}
		}
		headers := map[string]string{}
		for k, v := range r.Header {
			headers[k] = strings.Join(v, ", ")
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "headers": headers, "body": string(body), "host": r.Host,
		})
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"user":{"name":"ada","langs":["go","js"]},"n":3}`)
	})
	mux.HandleFunc("/gzip", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, "unzipped body")
		_ = zw.Close()
	})
	// /encoded?c=br or ?c=gzip,br: a body in those codings, applied in
	// order; /encoded-broken claims br and is not.
	mux.HandleFunc("/encoded", func(w http.ResponseWriter, r *http.Request) {
		codings := r.URL.Query().Get("c")
		w.Header().Set("Content-Encoding", strings.ReplaceAll(codings, ",", ", "))
		_, _ = w.Write(encodeCodings([]byte("encoded body"), strings.Split(codings, ",")))
	})
	mux.HandleFunc("/encoded-broken", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
		_, _ = io.WriteString(w, "this is not brotli")
	})
	mux.HandleFunc("/bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		_, _ = io.WriteString(w, strings.Repeat("x", n))
	})
	mux.HandleFunc("/digest-auth/{user}/{pass}", func(w http.ResponseWriter, r *http.Request) {
		if !digestOK(r, "tests", "n0nce", r.PathValue("user"), r.PathValue("pass")) {
			// Basic offered first, as servers that take either do.
			w.Header().Add("WWW-Authenticate", `Basic realm="tests"`)
			w.Header().Add("WWW-Authenticate", `Digest realm="tests", nonce="n0nce", qop="auth,auth-int", opaque="0paque", algorithm=MD5`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "welcome "+r.PathValue("user"))
	})
	mux.HandleFunc("/basic-auth/{user}/{pass}", func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != r.PathValue("user") || p != r.PathValue("pass") {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "welcome "+u)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// runHTTPScript runs src on the wall clock with __ENV.BASE_URL set to a
// fresh test server.
func runHTTPScript(t *testing.T, src string, mod func(*Config)) runResult {
	t.Helper()
	srv := newTestHTTPServer(t)
	return runScript(t, src, func(c *Config) {
		c.Env = map[string]string{"BASE_URL": srv.URL}
		if mod != nil {
			mod(c)
		}
	})
}

// encodeCodings compresses body with each content coding in turn.
func encodeCodings(body []byte, codings []string) []byte {
	for _, c := range codings {
		var buf bytes.Buffer
		var w io.WriteCloser
		switch strings.TrimSpace(c) {
		case "gzip":
			w = gzip.NewWriter(&buf)
		case "deflate":
			w = zlib.NewWriter(&buf)
		case "br":
			w = brotli.NewWriter(&buf)
		case "zstd":
			w, _ = zstd.NewWriter(&buf)
		default:
			continue
		}
		_, _ = w.Write(body)
		_ = w.Close()
		body = buf.Bytes()
	}
	return body
}

// decodeCodings undoes a Content-Encoding list, the last coding first.
func decodeCodings(body []byte, contentEncoding string) ([]byte, error) {
	codings := strings.Split(contentEncoding, ",")
	for i := len(codings) - 1; i >= 0; i-- {
		var r io.Reader
		var err error
		switch strings.TrimSpace(codings[i]) {
		case "gzip":
			r, err = gzip.NewReader(bytes.NewReader(body))
		case "deflate":
			r, err = zlib.NewReader(bytes.NewReader(body))
		case "br":
			r = brotli.NewReader(bytes.NewReader(body))
		case "zstd":
			var d *zstd.Decoder
			d, err = zstd.NewReader(bytes.NewReader(body))
			if err == nil {
				defer d.Close()
				r = d
			}
		default:
			continue
		}
		if err == nil {
			body, err = io.ReadAll(r)
		}
		if err != nil {
			return nil, err
		}
	}
	return body, nil
}

// digestOK checks a request's Digest answer (MD5, qop auth) to the
// challenge realm/nonce for user:pass.
func digestOK(r *http.Request, realm, nonce, user, pass string) bool {
	scheme, rest, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if scheme != "Digest" {
		return false
	}
	p := map[string]string{}
	for kv := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		p[k] = strings.Trim(v, `"`)
	}
	h := func(s string) string { sum := md5.Sum([]byte(s)); return hex.EncodeToString(sum[:]) } //nolint:gosec // the digest scheme's hash
	ha1 := h(fmt.Sprintf("%s:%s:%s", user, realm, pass))
	ha2 := h(r.Method + ":" + r.URL.RequestURI())
	want := h(fmt.Sprintf("%s:%s:%s:%s:auth:%s", ha1, nonce, p["nc"], p["cnonce"], ha2))
	return p["username"] == user && p["realm"] == realm && p["nonce"] == nonce && p["uri"] == r.URL.RequestURI() &&
		p["qop"] == "auth" && p["opaque"] == "0paque" && p["response"] == want
}
