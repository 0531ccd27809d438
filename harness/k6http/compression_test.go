package k6http

import (
	"bytes"
	"compress/zlib"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCompression_RoundTripsEveryCodingAndStack(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("a body to squeeze "), 50)
	for _, list := range []string{"gzip", "deflate", "br", "zstd", "gzip, br", "zstd,deflate,gzip"} {
		algos, err := parseCompression(list)
		require.NoError(t, err, list)
		enc := compressBody(body, algos)
		assert.NotEqual(t, body, enc, list)
		got, err := decodeBody(enc, list)
		require.NoError(t, err, list)
		assert.Equal(t, body, got, list)
	}
}

func TestCompression_DeflateIsTheZlibFormat(t *testing.T) {
	t.Parallel()
	zr, err := zlib.NewReader(bytes.NewReader(compressBody([]byte("hello"), []string{"deflate"})))
	require.NoError(t, err)
	got, err := io.ReadAll(zr)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(got))
}

func TestCompression_NamesWhatItDoesNotKnow(t *testing.T) {
	t.Parallel()
	_, err := parseCompression("gzip, lzw")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"lzw"`)
	assert.Contains(t, err.Error(), "gzip, deflate, br, zstd")
}

func TestCompression_UnknownCodingsArePassedOverAndBadBodiesFail(t *testing.T) {
	t.Parallel()
	enc := compressBody([]byte("x"), []string{"gzip"})
	got, err := decodeBody(enc, "gzip, x-custom")
	require.NoError(t, err)
	assert.Equal(t, "x", string(got))
	_, err = decodeBody([]byte("not zstd"), "zstd")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "error decompressing response body")
}
