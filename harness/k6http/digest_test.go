package k6http

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDigest_ReadsTheChallenge(t *testing.T) {
	t.Parallel()
	ch, ok := parseDigestChallenge(`Digest realm="a, b", nonce="n", qop="auth-int, auth", opaque="o", algorithm=SHA-256`)
	require.True(t, ok)
	assert.Equal(t, digestChallenge{realm: "a, b", nonce: "n", opaque: "o", algorithm: "SHA-256", qop: "auth"}, ch)
	_, ok = parseDigestChallenge(`Basic realm="x"`)
	assert.False(t, ok)
}

func TestDigest_AnswersWithSHA256Sess(t *testing.T) {
	t.Parallel()
	ch := digestChallenge{realm: "r", nonce: "n", algorithm: "SHA-256-sess", qop: "auth"}
	got, err := ch.authorization("u", "p", "GET", "/x?y=1")
	require.NoError(t, err)
	p := map[string]string{}
	for kv := range strings.SplitSeq(strings.TrimPrefix(got, "Digest "), ", ") {
		k, v, _ := strings.Cut(kv, "=")
		p[k] = strings.Trim(v, `"`)
	}
	h := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	ha1 := h(h("u:r:p") + ":n:" + p["cnonce"])
	want := h(ha1 + ":n:" + p["nc"] + ":" + p["cnonce"] + ":auth:" + h("GET:/x?y=1"))
	assert.Equal(t, want, p["response"])
	assert.Equal(t, "/x?y=1", p["uri"])
	assert.Equal(t, "SHA-256-sess", p["algorithm"])
}

func TestDigest_NamesAnAlgorithmItLacks(t *testing.T) {
	t.Parallel()
	_, err := digestChallenge{nonce: "n", algorithm: "SHA-512-256"}.authorization("u", "p", "GET", "/")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"SHA-512-256"`)
}
