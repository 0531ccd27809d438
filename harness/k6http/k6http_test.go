package k6http

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClassify_GivesK6sErrorCodes(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return &url.Error{Op: "Get", URL: "http://x/", Err: err} }
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	tests := []struct {
		name string
		err  error
		code int
	}{
		{"own timeout", wrap(errTimeout), codeTimeout},
		{"deadline", wrap(context.DeadlineExceeded), codeTimeout},
		{"no such host", wrap(dial(&net.DNSError{Err: "no such host", Name: "a.invalid", IsNotFound: true})), codeDNSNoSuchHost},
		{"other DNS failure", wrap(dial(&net.DNSError{Err: "server misbehaving", Name: "a.test"})), codeDNS},
		{"refused", wrap(dial(&os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED})), codeTCPRefused},
		{"reset", wrap(&net.OpError{Op: "read", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}), codeTCPReset},
		{"broken pipe", wrap(&net.OpError{Op: "write", Err: syscall.EPIPE}), codeBrokenPipe},
		{"dial timeout", wrap(dial(os.ErrDeadlineExceeded)), codeTCPDialTimeout},
		{"other dial failure", wrap(dial(errors.New("network unreachable"))), codeTCPDial},
		{"anything else", wrap(errors.New("odd")), codeGeneric},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, msg := classify(tc.err)
			assert.Equal(t, tc.code, code, "%v", tc.err)
			assert.NotContains(t, msg, `Get "http://x/"`, "the URL prefix is dropped")
		})
	}
}

func TestStatusCode_IsK6sOffsetForErrorStatuses(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]int{200: 0, 302: 0, 399: 0, 400: 1400, 404: 1404, 503: 1503, 599: 1599} {
		assert.Equal(t, want, statusCode(status), "status %d", status)
	}
}

func TestExpected_MatchesStatusesAndRanges(t *testing.T) {
	t.Parallel()
	e := &expected{single: []int{404}, ranges: [][2]int{{500, 503}}}
	for status, want := range map[int]bool{404: true, 500: true, 503: true, 504: false, 200: false} {
		assert.Equal(t, want, e.match(status), "status %d", status)
	}
	for status, want := range map[int]bool{199: false, 200: true, 399: true, 400: false} {
		assert.Equal(t, want, defaultExpected.match(status), "default, status %d", status)
	}
}

func TestParseOptions_DefaultsAndErrors(t *testing.T) {
	t.Parallel()
	o, err := ParseOptions(map[string]any{})
	require.NoError(t, err)
	assert.Equal(t, 20, o.Batch)
	assert.Equal(t, 6, o.BatchPerHost)
	assert.Equal(t, 10, o.MaxRedirects)
	assert.Equal(t, DefaultUserAgent, o.UserAgent)
	for _, tag := range DefaultSystemTags {
		assert.True(t, o.keepTag(tag), tag)
	}
	assert.False(t, o.keepTag("vu"), "vu is a system tag off by default")
	assert.True(t, o.keepTag("team"), "the script's own tags are kept")

	o, err = ParseOptions(map[string]any{"systemTags": []any{"status"}, "userAgent": "", "hosts": map[string]any{"a.test": "127.0.0.1"}})
	require.NoError(t, err)
	assert.True(t, o.keepTag("status"))
	assert.False(t, o.keepTag("method"))
	assert.Empty(t, o.UserAgent)
	assert.Equal(t, "127.0.0.1", o.Hosts["a.test"])

	for _, bad := range []map[string]any{
		{"batch": -1.0}, {"batch": 1.5}, {"insecureSkipTLSVerify": "yes"}, {"userAgent": 3.0},
		{"hosts": "a"}, {"hosts": map[string]any{"a": 1.0}}, {"systemTags": []any{"nope"}}, {"systemTags": "status"},
	} {
		_, err := ParseOptions(bad)
		assert.Error(t, err, fmt.Sprint(bad))
	}
}

// TestParseOptions_BatchWantsAWholeNumber: batch and batchPerHost take a
// whole number ≥ 0, and the error names the option.
func TestParseOptions_BatchWantsAWholeNumber(t *testing.T) {
	o, err := ParseOptions(map[string]any{"batch": float64(3), "batchPerHost": float64(0)})
	require.NoError(t, err)
	assert.Equal(t, 3, o.Batch)
	assert.Zero(t, o.BatchPerHost)
	for _, v := range []any{float64(-1), 1.5, "2", 1e300} {
		_, err := ParseOptions(map[string]any{"batchPerHost": v})
		require.Error(t, err, "%v", v)
		assert.Contains(t, err.Error(), "options.batchPerHost", "%v", v)
	}
}
