package harness

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestExitCodes_MatchK6 pins each exit code to the number k6 uses
// (errext/exitcodes): CI pipelines written for k6 branch on these values,
// so they are part of the interface.
func TestExitCodes_MatchK6(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  int
		want int
	}{
		{"ExitOK", ExitOK, 0},
		{"ExitThresholdsFailed", ExitThresholdsFailed, 99},
		{"ExitSetupTimeout", ExitSetupTimeout, 100},
		{"ExitTeardownTimeout", ExitTeardownTimeout, 101},
		{"ExitInvalidConfig", ExitInvalidConfig, 104},
		{"ExitExternalAbort", ExitExternalAbort, 105},
		{"ExitScriptException", ExitScriptException, 107},
		{"ExitScriptAborted", ExitScriptAborted, 108},
		{"ExitTestFailed", ExitTestFailed, 110},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.got)
		})
	}
}

func TestExitCode_FindsTheCodeInTheChain(t *testing.T) {
	t.Parallel()
	wrapped := fmt.Errorf("running: %w", exitErrorf(ExitSetupTimeout, "setup took too long"))
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil is success", nil, ExitOK},
		{"an ExitError gives its code", exitErrorf(ExitInvalidConfig, "bad option"), ExitInvalidConfig},
		{"a wrapped ExitError gives its code", wrapped, ExitSetupTimeout},
		{"any other error is a script exception", errors.New("boom"), ExitScriptException},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ExitCode(tc.err))
		})
	}
}
