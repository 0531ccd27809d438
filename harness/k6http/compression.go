package k6http

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// codeDecompression is k6's error code for a response body that does not
// decode as its Content-Encoding says.
const codeDecompression = 1701

// encodings are the content codings k6 compresses request bodies with and
// decodes response bodies from ("deflate" is the zlib format, as HTTP
// defines it).
var encodings = map[string]bool{"gzip": true, "deflate": true, "br": true, "zstd": true}

// parseCompression reads params.compression: one coding or several,
// comma-separated, applied in order.
func parseCompression(v string) ([]string, error) {
	var algos []string
	for a := range strings.SplitSeq(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if !encodings[a] {
			return nil, fmt.Errorf("%q is not supported (gzip, deflate, br, zstd, or several of them separated by commas)", a)
		}
		algos = append(algos, a)
	}
	return algos, nil
}

// compressBody compresses body with each coding in turn.
func compressBody(body []byte, algos []string) []byte {
	for _, algo := range algos {
		var buf bytes.Buffer
		var w io.WriteCloser
		switch algo {
		case "gzip":
			w = gzip.NewWriter(&buf)
		case "deflate":
			w = zlib.NewWriter(&buf)
		case "br":
			w = brotli.NewWriter(&buf)
		case "zstd":
			w, _ = zstd.NewWriter(&buf) // no options: no error
		}
		_, _ = w.Write(body) // writes to a bytes.Buffer do not fail
		_ = w.Close()
		body = buf.Bytes()
	}
	return body
}

// decodeBody undoes the codings a response's Content-Encoding lists, the
// last applied first, as k6 does; a coding it does not know is passed
// over.
func decodeBody(body []byte, contentEncoding string) ([]byte, error) {
	codings := strings.Split(contentEncoding, ",")
	for i := len(codings) - 1; i >= 0; i-- {
		algo := strings.TrimSpace(codings[i])
		var r io.Reader
		var err error
		src := bytes.NewReader(body)
		switch algo {
		case "gzip":
			r, err = gzip.NewReader(src)
		case "deflate":
			r, err = zlib.NewReader(src)
		case "br":
			r = brotli.NewReader(src)
		case "zstd":
			var d *zstd.Decoder
			d, err = zstd.NewReader(src, zstd.WithDecoderConcurrency(1))
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
			return nil, fmt.Errorf("error decompressing response body (%w)", err)
		}
	}
	return body, nil
}
