package k6http

import (
	"strings"

	"github.com/grafana/sobek"
)

// expected is what http.expectedStatuses() returns: the statuses and
// ranges a response must have to count as expected.
type expected struct {
	single []int
	ranges [][2]int
}

// defaultExpected is k6's default callback: 200 to 399.
var defaultExpected = &expected{ranges: [][2]int{{200, 399}}}

func (e *expected) match(status int) bool {
	for _, s := range e.single {
		if s == status {
			return true
		}
	}
	for _, r := range e.ranges {
		if status >= r[0] && status <= r[1] {
			return true
		}
	}
	return false
}

func (c *Client) parseExpected(args []sobek.Value) *expected {
	e := &expected{}
	for i, a := range args {
		if obj, ok := a.(*sobek.Object); ok {
			lo, hi := obj.Get("min"), obj.Get("max")
			if lo == nil || hi == nil || sobek.IsUndefined(lo) || sobek.IsUndefined(hi) {
				c.throw("expectedStatuses: argument %d must be a status or {min, max}, got %s", i+1, a.String())
			}
			e.ranges = append(e.ranges, [2]int{int(lo.ToInteger()), int(hi.ToInteger())})
			continue
		}
		f := a.ToFloat()
		if f != float64(int(f)) || f < 0 {
			c.throw("expectedStatuses: argument %d must be a whole status code, got %s", i+1, a.String())
		}
		e.single = append(e.single, int(f))
	}
	return e
}

// toCallback reads a response callback: null turns classification off.
func (c *Client) toCallback(v sobek.Value, where string) *expected {
	if v == nil || sobek.IsNull(v) {
		return nil
	}
	if e, ok := v.Export().(*expected); ok {
		return e
	}
	c.throw("%s: only http.expectedStatuses(...) or null is supported as a response callback", where)
	return nil
}

// fileData is what http.file() returns, sent as a multipart part.
type fileData struct {
	Data        []byte `js:"data"`
	Filename    string `js:"filename"`
	ContentType string `js:"content_type"`
}

func (c *Client) file(call sobek.FunctionCall) sobek.Value {
	data := bytesOf(call.Argument(0))
	name := "file"
	if a := call.Argument(1); !sobek.IsUndefined(a) {
		name = a.String()
	}
	ct := "application/octet-stream"
	if a := call.Argument(2); !sobek.IsUndefined(a) {
		ct = a.String()
	}
	return c.rt.ToValue(&fileData{Data: data, Filename: name, ContentType: ct})
}

// taggedURL is the http.url`...` template tag: the URL with the
// interpolations filled in, named by the template with ${} in their
// place so that every such URL shares one name tag.
func (c *Client) taggedURL(call sobek.FunctionCall) sobek.Value {
	strs := call.Argument(0).ToObject(c.rt)
	n := int(strs.Get("length").ToInteger())
	var u, name strings.Builder
	for i := range n {
		part := strs.Get(intKey(i)).String()
		u.WriteString(part)
		name.WriteString(part)
		if i+1 < n && i+1 < len(call.Arguments) {
			u.WriteString(call.Arguments[i+1].String())
			name.WriteString("${}")
		}
	}
	obj := c.rt.NewObject()
	_ = obj.Set("url", u.String())
	_ = obj.Set("name", name.String())
	full := u.String()
	_ = obj.Set("toString", func(sobek.FunctionCall) sobek.Value { return c.rt.ToValue(full) })
	return obj
}

func intKey(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return intKey(i/10) + digits[i%10:i%10+1]
}

// bytesOf converts a body value: a string's UTF-8, an ArrayBuffer's or a
// typed array's bytes.
func bytesOf(v sobek.Value) []byte {
	if v == nil || sobek.IsUndefined(v) || sobek.IsNull(v) {
		return nil
	}
	switch x := v.Export().(type) {
	case sobek.ArrayBuffer:
		return append([]byte(nil), x.Bytes()...)
	case []byte:
		return append([]byte(nil), x...)
	case string:
		return []byte(x)
	}
	return []byte(v.String())
}
