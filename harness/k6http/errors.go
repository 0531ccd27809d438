package k6http

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
)

// k6's error codes (the error_code field and tag): 1000-1099 general,
// 1100 DNS, 1200 TCP, 1300 TLS, 1400-1599 HTTP statuses, 1600 HTTP/2.
const (
	codeGeneric        = 1000
	codeInvalidURL     = 1020
	codeTimeout        = 1050
	codeDNS            = 1100
	codeDNSNoSuchHost  = 1101
	codeTCP            = 1200
	codeBrokenPipe     = 1201
	codeTCPDial        = 1210
	codeTCPDialTimeout = 1211
	codeTCPRefused     = 1212
	codeTCPReset       = 1220
	codeTLS            = 1300
	codeTLSUnknownCA   = 1310
	codeTLSHostname    = 1311
	codeHTTP2          = 1600
)

// errTimeout is the request's own timeout (params.timeout) running out.
var errTimeout = errors.New("request timeout")

// classify returns k6's error code and message for a failed request.
// The message drops net/http's `Get "url": ` prefix, as k6 does.
func classify(err error) (int, string) {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	msg := err.Error()
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.Is(err, errTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return codeTCPDialTimeout, msg
		}
		return codeTimeout, errTimeout.Error()
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return codeDNSNoSuchHost, msg
		}
		return codeDNS, msg
	case errors.As(err, &unknownCA):
		return codeTLSUnknownCA, msg
	case errors.As(err, &hostErr):
		return codeTLSHostname, msg
	case errors.As(err, &certErr):
		if errors.As(certErr.Err, &unknownCA) {
			return codeTLSUnknownCA, msg
		}
		if errors.As(certErr.Err, &hostErr) {
			return codeTLSHostname, msg
		}
		return codeTLS, msg
	case errors.Is(err, syscall.ECONNREFUSED):
		return codeTCPRefused, msg
	case errors.Is(err, syscall.ECONNRESET):
		return codeTCPReset, msg
	case errors.Is(err, syscall.EPIPE):
		return codeBrokenPipe, msg
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return codeTCPDial, msg
	case errors.As(err, &opErr):
		return codeTCP, msg
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return codeTCP, msg
	case strings.Contains(msg, "http2:"):
		return codeHTTP2, msg
	case strings.Contains(msg, "tls:"):
		return codeTLS, msg
	}
	return codeGeneric, msg
}

// statusCode is the error code of an HTTP status: 1000+status for 4xx and
// 5xx, 0 otherwise.
func statusCode(status int) int {
	if status >= 400 && status < 600 {
		return 1000 + status
	}
	return 0
}
