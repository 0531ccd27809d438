package harness

import (
	"errors"
	"fmt"
)

// Exit codes returned by Run, matching k6's so that CI pipelines written for
// k6 branch on the same values.
const (
	// ExitOK means the test ran and every threshold passed.
	ExitOK = 0
	// ExitThresholdsFailed means at least one threshold was crossed, either at
	// the end of the test or earlier by an abortOnFail threshold.
	ExitThresholdsFailed = 99
	// ExitSetupTimeout means setup() did not return within setupTimeout.
	ExitSetupTimeout = 100
	// ExitTeardownTimeout means teardown() did not return within
	// teardownTimeout.
	ExitTeardownTimeout = 101
	// ExitInvalidConfig means the options, scenarios or thresholds are invalid.
	ExitInvalidConfig = 104
	// ExitExternalAbort means the run was stopped from outside: the context
	// given to Run was cancelled, which the CLI does on SIGINT or SIGTERM.
	// Teardown (unless setup had not finished) and the summary still ran.
	ExitExternalAbort = 105
	// ExitScriptException means the script threw outside an iteration: while
	// loading (init context), in setup or in teardown. (A handleSummary that
	// throws is logged and the default summary printed instead, as in k6.)
	ExitScriptException = 107
	// ExitScriptAborted means the script called exec.test.abort().
	ExitScriptAborted = 108
	// ExitTestFailed means the script called exec.test.fail(); the test ran to
	// its end and was marked failed.
	ExitTestFailed = 110
)

// ExitError is an error that carries the process exit code the runner maps
// it to. Run returns one whenever the exit code is not ExitOK.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap gives access to the underlying cause.
func (e *ExitError) Unwrap() error { return e.Err }

func exitErrorf(code int, format string, args ...any) *ExitError {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// ExitCode returns the exit code that err maps to: ExitOK for nil, the code
// of an *ExitError anywhere in its chain, ExitScriptException otherwise.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ExitScriptException
}
