package harness

import (
	"encoding/base64"

	"github.com/grafana/sobek"
)

// newEncodingModule implements k6/encoding: b64encode and b64decode with
// k6's four alphabets (std, rawstd, url, rawurl).
func newEncodingModule(h VU) ModuleInstance {
	v := h.(*vu)
	rt := v.rt
	named := map[string]any{
		"b64encode": func(call sobek.FunctionCall) sobek.Value {
			data := bytesArg(rt, "b64encode", call.Argument(0))
			enc := b64Encoding(rt, "b64encode", call.Argument(1))
			return rt.ToValue(enc.EncodeToString(data))
		},
		"b64decode": func(call sobek.FunctionCall) sobek.Value {
			enc := b64Encoding(rt, "b64decode", call.Argument(1))
			out, err := enc.DecodeString(call.Argument(0).String())
			if err != nil {
				throwf(rt, "b64decode: %v", err)
			}
			if f := call.Argument(2); !sobek.IsUndefined(f) && f.String() == "s" {
				return rt.ToValue(string(out))
			}
			return rt.ToValue(rt.NewArrayBuffer(out))
		},
	}
	return ExportsFunc(func() Exports { return Exports{Named: named} })
}

func b64Encoding(rt *sobek.Runtime, fn string, v sobek.Value) *base64.Encoding {
	name := "std"
	if v != nil && !sobek.IsUndefined(v) && !sobek.IsNull(v) && v.String() != "" {
		name = v.String()
	}
	switch name {
	case "std":
		return base64.StdEncoding
	case "rawstd":
		return base64.RawStdEncoding
	case "url":
		return base64.URLEncoding
	case "rawurl":
		return base64.RawURLEncoding
	}
	throwf(rt, "%s: unknown encoding %q: want std, rawstd, url or rawurl", fn, name)
	return nil
}

// bytesArg reads binary input as k6 modules accept it: a string (its UTF-8
// bytes), an ArrayBuffer, or a typed array or DataView (the bytes it views).
func bytesArg(rt *sobek.Runtime, fn string, v sobek.Value) []byte {
	if v == nil || sobek.IsUndefined(v) || sobek.IsNull(v) {
		throwf(rt, "%s: want a string or an ArrayBuffer, got %v", fn, v)
	}
	switch x := v.Export().(type) {
	case string:
		return []byte(x)
	case sobek.ArrayBuffer:
		return x.Bytes()
	case []byte:
		return x
	}
	if obj, ok := v.(*sobek.Object); ok {
		if buf, ok := obj.Get("buffer").Export().(sobek.ArrayBuffer); ok {
			b := buf.Bytes()
			off := int(obj.Get("byteOffset").ToInteger())
			n := int(obj.Get("byteLength").ToInteger())
			if off >= 0 && n >= 0 && off+n <= len(b) {
				return b[off : off+n]
			}
		}
	}
	return []byte(v.String())
}
