package harness

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"sort"
	"strings"

	"github.com/grafana/sobek"
)

// hashes are the algorithms of k6/crypto that the standard library has
// (k6's md4 and ripemd160 are left out; see doc.go).
var hashes = map[string]func() hash.Hash{
	"md5":        md5.New,
	"sha1":       sha1.New,
	"sha256":     sha256.New,
	"sha384":     sha512.New384,
	"sha512":     sha512.New,
	"sha512_224": sha512.New512_224,
	"sha512_256": sha512.New512_256,
}

// newCryptoModule implements k6/crypto: one function per hash, hmac,
// createHash and createHMAC (update/digest objects) and randomBytes.
func newCryptoModule(h VU) ModuleInstance {
	v := h.(*vu)
	rt := v.rt
	named := map[string]any{
		"hmac": func(call sobek.FunctionCall) sobek.Value {
			mac := hmac.New(hashFor(rt, "hmac", call.Argument(0)), bytesArg(rt, "hmac", call.Argument(1)))
			mac.Write(bytesArg(rt, "hmac", call.Argument(2)))
			return digestValue(rt, "hmac", mac.Sum(nil), call.Argument(3))
		},
		"createHash": func(call sobek.FunctionCall) sobek.Value {
			return hasherObject(rt, hashFor(rt, "createHash", call.Argument(0))())
		},
		"createHMAC": func(call sobek.FunctionCall) sobek.Value {
			newHash := hashFor(rt, "createHMAC", call.Argument(0))
			return hasherObject(rt, hmac.New(newHash, bytesArg(rt, "createHMAC", call.Argument(1))))
		},
		"randomBytes": func(call sobek.FunctionCall) sobek.Value {
			n := call.Argument(0).ToInteger()
			if n < 1 || n > 1<<30 {
				throwf(rt, "randomBytes: want a size of at least 1, got %s", call.Argument(0).String())
			}
			b := make([]byte, n)
			_, _ = rand.Read(b)
			return rt.ToValue(rt.NewArrayBuffer(b))
		},
	}
	for name, newHash := range hashes {
		named[name] = func(call sobek.FunctionCall) sobek.Value {
			hh := newHash()
			hh.Write(bytesArg(rt, name, call.Argument(0)))
			return digestValue(rt, name, hh.Sum(nil), call.Argument(1))
		}
	}
	return ExportsFunc(func() Exports { return Exports{Named: named} })
}

func hashFor(rt *sobek.Runtime, fn string, v sobek.Value) func() hash.Hash {
	name := valueString(v)
	if newHash, ok := hashes[name]; ok {
		return newHash
	}
	names := make([]string, 0, len(hashes))
	for k := range hashes {
		names = append(names, k)
	}
	sort.Strings(names)
	throwf(rt, "%s: unsupported algorithm %q: want one of %s", fn, name, strings.Join(names, ", "))
	return nil
}

// hasherObject is the {update, digest} object of createHash and createHMAC.
func hasherObject(rt *sobek.Runtime, hh hash.Hash) *sobek.Object {
	o := rt.NewObject()
	_ = o.Set("update", func(call sobek.FunctionCall) sobek.Value {
		hh.Write(bytesArg(rt, "update", call.Argument(0)))
		return o
	})
	_ = o.Set("digest", func(call sobek.FunctionCall) sobek.Value {
		return digestValue(rt, "digest", hh.Sum(nil), call.Argument(0))
	})
	return o
}

// digestValue renders a digest in k6's output encodings: hex, base64,
// base64url, base64rawurl, or binary (an ArrayBuffer).
func digestValue(rt *sobek.Runtime, fn string, sum []byte, enc sobek.Value) sobek.Value {
	switch name := valueString(enc); name {
	case "hex":
		return rt.ToValue(hex.EncodeToString(sum))
	case "base64":
		return rt.ToValue(base64.StdEncoding.EncodeToString(sum))
	case "base64url":
		return rt.ToValue(base64.URLEncoding.EncodeToString(sum))
	case "base64rawurl":
		return rt.ToValue(base64.RawURLEncoding.EncodeToString(sum))
	case "binary":
		return rt.ToValue(rt.NewArrayBuffer(sum))
	default:
		throwf(rt, "%s: unknown output encoding %q: want hex, base64, base64url, base64rawurl or binary", fn, name)
	}
	return nil
}
