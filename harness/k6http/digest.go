package k6http

import (
	"crypto/md5" //nolint:gosec // digest authentication's MD5 is the server's choice, not a safeguard of ours
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
)

// digestChallenge is what a server's `WWW-Authenticate: Digest ...` asks.
type digestChallenge struct {
	realm, nonce, opaque, algorithm, qop string
}

// parseDigestChallenge reads a Digest challenge; false when the header is
// none.
func parseDigestChallenge(header string) (digestChallenge, bool) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(header), " ")
	if !strings.EqualFold(scheme, "Digest") {
		return digestChallenge{}, false
	}
	var ch digestChallenge
	for _, kv := range splitParams(rest) {
		k, v, _ := strings.Cut(kv, "=")
		v = strings.Trim(strings.TrimSpace(v), `"`)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "realm":
			ch.realm = v
		case "nonce":
			ch.nonce = v
		case "opaque":
			ch.opaque = v
		case "algorithm":
			ch.algorithm = v
		case "qop":
			for q := range strings.SplitSeq(v, ",") {
				if strings.TrimSpace(q) == "auth" {
					ch.qop = "auth"
				}
			}
		}
	}
	return ch, ch.nonce != ""
}

// splitParams splits a challenge's comma-separated parameters, keeping
// commas inside quoted values.
func splitParams(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// authorization answers the challenge for one request (RFC 7616: MD5,
// MD5-sess, SHA-256 and SHA-256-sess; qop auth or none).
func (ch digestChallenge) authorization(user, pass, method, uri string) (string, error) {
	algo := strings.ToUpper(ch.algorithm)
	var newHash func() hash.Hash
	switch strings.TrimSuffix(algo, "-SESS") {
	case "", "MD5":
		newHash = md5.New
	case "SHA-256":
		newHash = sha256.New
	default:
		return "", fmt.Errorf("digest authentication: the server asks for algorithm %q; supported are MD5, MD5-sess, SHA-256 and SHA-256-sess", ch.algorithm)
	}
	h := func(parts ...string) string {
		d := newHash()
		d.Write([]byte(strings.Join(parts, ":")))
		return hex.EncodeToString(d.Sum(nil))
	}
	var nonceBytes [8]byte
	_, _ = rand.Read(nonceBytes[:])
	cnonce, nc := hex.EncodeToString(nonceBytes[:]), "00000001"
	ha1 := h(user, ch.realm, pass)
	if strings.HasSuffix(algo, "-SESS") {
		ha1 = h(ha1, ch.nonce, cnonce)
	}
	ha2 := h(method, uri)
	var b strings.Builder
	fmt.Fprintf(&b, `Digest username="%s", realm="%s", nonce="%s", uri="%s"`, user, ch.realm, ch.nonce, uri)
	if ch.qop == "auth" {
		fmt.Fprintf(&b, `, qop=auth, nc=%s, cnonce="%s", response="%s"`, nc, cnonce, h(ha1, ch.nonce, nc, cnonce, "auth", ha2))
	} else {
		fmt.Fprintf(&b, `, response="%s"`, h(ha1, ch.nonce, ha2))
	}
	if ch.algorithm != "" {
		fmt.Fprintf(&b, `, algorithm=%s`, ch.algorithm)
	}
	if ch.opaque != "" {
		fmt.Fprintf(&b, `, opaque="%s"`, ch.opaque)
	}
	return b.String(), nil
}
