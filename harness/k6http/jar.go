package k6http

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"time"

	"github.com/grafana/sobek"
)

// vuJar returns the VU's cookie jar, new at each iteration unless
// options.noCookiesReset.
func (c *Client) vuJar() *cookiejar.Jar {
	if c.jar == nil {
		c.jar, _ = cookiejar.New(nil)
		c.jarObj = nil
	}
	return c.jar
}

func (c *Client) vuJarObject() *sobek.Object {
	jar := c.vuJar()
	c.jarUsed.Store(true)
	if c.jarObj == nil {
		c.jarObj = c.jarObject(jar)
	}
	return c.jarObj
}

// jarRef marks a JS cookie jar object so that params.jar finds its jar.
type jarRef struct{ jar *cookiejar.Jar }

// jarObject wraps jar in k6's CookieJar methods.
func (c *Client) jarObject(jar *cookiejar.Jar) *sobek.Object {
	rt := c.rt
	obj := rt.NewObject()
	parse := func(v sobek.Value) *url.URL {
		u, err := url.Parse(v.String())
		if err != nil || u.Host == "" {
			c.throw("cookie jar: %q is not an absolute URL", v.String())
		}
		return u
	}
	_ = obj.SetSymbol(c.jarSym, rt.ToValue(&jarRef{jar: jar}))
	_ = obj.Set("cookiesForURL", func(call sobek.FunctionCall) sobek.Value {
		out := rt.NewObject()
		byName := map[string][]any{}
		var order []string
		for _, ck := range jar.Cookies(parse(call.Argument(0))) {
			if _, ok := byName[ck.Name]; !ok {
				order = append(order, ck.Name)
			}
			byName[ck.Name] = append(byName[ck.Name], ck.Value)
		}
		for _, n := range order {
			_ = out.Set(n, byName[n])
		}
		return out
	})
	_ = obj.Set("set", func(call sobek.FunctionCall) sobek.Value {
		u := parse(call.Argument(0))
		ck := &http.Cookie{Name: call.Argument(1).String(), Value: call.Argument(2).String()}
		if o, ok := call.Argument(3).(*sobek.Object); ok {
			str := func(k string) string {
				if v := o.Get(k); v != nil && !sobek.IsUndefined(v) && !sobek.IsNull(v) {
					return v.String()
				}
				return ""
			}
			ck.Domain, ck.Path = str("domain"), str("path")
			if s := str("expires"); s != "" {
				t, err := http.ParseTime(s)
				if err != nil {
					c.throw("cookie jar: expires %q is not an HTTP date: %v", s, err)
				}
				ck.Expires = t
			}
			if v := o.Get("max_age"); v != nil && !sobek.IsUndefined(v) {
				ck.MaxAge = int(v.ToInteger())
			}
			ck.Secure = o.Get("secure") != nil && o.Get("secure").ToBoolean()
			ck.HttpOnly = o.Get("http_only") != nil && o.Get("http_only").ToBoolean()
		}
		jar.SetCookies(u, []*http.Cookie{ck})
		return sobek.Undefined()
	})
	expire := func(u *url.URL, name string) {
		var gone []*http.Cookie
		for _, ck := range jar.Cookies(u) {
			if name == "" || ck.Name == name {
				gone = append(gone, &http.Cookie{Name: ck.Name, Value: "", Path: "/", Expires: time.Unix(1, 0), MaxAge: -1})
			}
		}
		jar.SetCookies(u, gone)
	}
	_ = obj.Set("clear", func(call sobek.FunctionCall) sobek.Value {
		expire(parse(call.Argument(0)), "")
		return sobek.Undefined()
	})
	_ = obj.Set("delete", func(call sobek.FunctionCall) sobek.Value {
		expire(parse(call.Argument(0)), call.Argument(1).String())
		return sobek.Undefined()
	})
	return obj
}

// jarOf returns the jar behind a JS cookie jar object.
func (c *Client) jarOf(v sobek.Value) *cookiejar.Jar {
	if obj, ok := v.(*sobek.Object); ok {
		if v := obj.GetSymbol(c.jarSym); v != nil {
			if ref, ok := v.Export().(*jarRef); ok {
				return ref.jar
			}
		}
	}
	c.throw("params.jar: not a cookie jar (use http.cookieJar() or new http.CookieJar())")
	return nil
}
