package k6http

import (
	"fmt"
	"math"
	"sort"

	"github.com/kvstrand/mocker/internal/jsonval"
)

// DefaultUserAgent is the User-Agent header of requests when
// options.userAgent is not set.
const DefaultUserAgent = "mocker-harness (k6-compatible; https://github.com/kvstrand/mocker)"

// Options are the test options the HTTP client obeys, read from the
// script's exported options under k6's names.
type Options struct {
	// InsecureSkipTLSVerify accepts any server certificate.
	InsecureSkipTLSVerify bool
	// UserAgent is the default User-Agent header ("" sends none when
	// options.userAgent was set to "" explicitly).
	UserAgent string
	// Batch bounds the requests one http.batch() call runs at once;
	// BatchPerHost bounds them per host (0: no per-host bound).
	Batch, BatchPerHost int
	// DiscardResponseBodies makes responseType default to "none".
	DiscardResponseBodies bool
	// Hosts maps a host name (or host:port) to the address dialled
	// instead, as an /etc/hosts entry would.
	Hosts map[string]string
	// NoConnectionReuse closes every connection after its request;
	// NoVUConnectionReuse closes a VU's connections between iterations.
	NoConnectionReuse, NoVUConnectionReuse bool
	// MaxRedirects is how many redirects a request follows (params.redirects
	// overrides it per request).
	MaxRedirects int
	// NoCookiesReset keeps a VU's cookies from one iteration to the next.
	NoCookiesReset bool
	// Throw makes a failed request throw instead of returning a response
	// with error and error_code set.
	Throw bool
	// SystemTags are the system tags samples carry.
	SystemTags map[string]bool
}

// DefaultSystemTags are k6's system tags on by default.
var DefaultSystemTags = []string{
	"proto", "subproto", "status", "method", "url", "name", "group", "check",
	"error", "error_code", "tls_version", "scenario", "service", "expected_response",
}

// allSystemTags are every system tag k6 knows, on by default or not: a
// tag by one of these names is dropped from samples unless systemTags
// lists it; other tags (the script's) are always kept.
var allSystemTags = map[string]bool{
	"proto": true, "subproto": true, "status": true, "method": true, "url": true, "name": true,
	"group": true, "check": true, "error": true, "error_code": true, "tls_version": true,
	"scenario": true, "service": true, "expected_response": true, "vu": true, "iter": true,
	"ip": true, "ocsp_status": true,
}

// ParseOptions reads the HTTP options out of the script's exported
// options (decoded JSON); a missing key keeps k6's default.
func ParseOptions(raw map[string]any) (Options, error) {
	o := Options{UserAgent: DefaultUserAgent, Batch: 20, BatchPerHost: 6, MaxRedirects: 10}
	var err error
	flag := func(key string, dst *bool) {
		v, ok := raw[key]
		if !ok || v == nil || err != nil {
			return
		}
		b, isBool := v.(bool)
		if !isBool {
			err = fmt.Errorf("options.%s: want true or false, got %v", key, v)
			return
		}
		*dst = b
	}
	count := func(key string, dst *int) {
		v, ok := raw[key]
		if !ok || v == nil || err != nil {
			return
		}
		n, rerr := jsonval.Int("options."+key, v, 0, math.MaxInt32)
		if rerr != nil {
			err = rerr
			return
		}
		*dst = int(n)
	}
	flag("insecureSkipTLSVerify", &o.InsecureSkipTLSVerify)
	flag("discardResponseBodies", &o.DiscardResponseBodies)
	flag("noConnectionReuse", &o.NoConnectionReuse)
	flag("noVUConnectionReuse", &o.NoVUConnectionReuse)
	flag("noCookiesReset", &o.NoCookiesReset)
	flag("throw", &o.Throw)
	count("batch", &o.Batch)
	count("batchPerHost", &o.BatchPerHost)
	count("maxRedirects", &o.MaxRedirects)
	if err != nil {
		return Options{}, err
	}
	if v, ok := raw["userAgent"]; ok && v != nil {
		s, isStr := v.(string)
		if !isStr {
			return Options{}, fmt.Errorf("options.userAgent: want a string, got %v", v)
		}
		o.UserAgent = s
	}
	if v, ok := raw["hosts"]; ok && v != nil {
		m, isMap := v.(map[string]any)
		if !isMap {
			return Options{}, fmt.Errorf("options.hosts: want an object of host name → address, got %v", v)
		}
		o.Hosts = make(map[string]string, len(m))
		for k, a := range m {
			s, isStr := a.(string)
			if !isStr {
				return Options{}, fmt.Errorf("options.hosts[%q]: want an address string, got %v", k, a)
			}
			o.Hosts[k] = s
		}
	}
	o.SystemTags = map[string]bool{}
	tags := DefaultSystemTags
	if v, ok := raw["systemTags"]; ok && v != nil {
		list, isList := v.([]any)
		if !isList {
			return Options{}, fmt.Errorf("options.systemTags: want a list of tag names, got %v", v)
		}
		tags = make([]string, 0, len(list))
		for _, e := range list {
			s, isStr := e.(string)
			if !isStr || !allSystemTags[s] {
				known := make([]string, 0, len(allSystemTags))
				for k := range allSystemTags {
					known = append(known, k)
				}
				sort.Strings(known)
				return Options{}, fmt.Errorf("options.systemTags: %v is not a system tag (known: %v)", e, known)
			}
			tags = append(tags, s)
		}
	}
	for _, t := range tags {
		o.SystemTags[t] = true
	}
	return o, nil
}

// keepTag reports whether a sample keeps the tag named key.
func (o *Options) keepTag(key string) bool {
	return !allSystemTags[key] || o.SystemTags[key]
}
