package worker

import (
	"encoding/json"
	"errors"
	"fmt"
)

// UsageError is a WorkerConfig that makes no sense (a role, engine
// arguments, an endpoint URL): what the user must change, named by its
// flag. `mocker worker` exits with its usage code on one.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{Err: err}
}

// IsUsage reports whether err is a UsageError.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// checkWorkerArgs refuses engine arguments a worker must not take as
// given: a block_size of 0 means "the engine's default" to the engine
// (64 for vLLM), which no router of the usual 16 would accept.
func checkWorkerArgs(raw []byte) error {
	if len(raw) == 0 {
		return nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil // the parser says what is wrong with it
	}
	if v, ok := top["block_size"]; ok && string(v) == "0" {
		return fmt.Errorf("--args: block_size 0: a worker must state its block size, the cluster's (default 16); 0 would register the engine's own default")
	}
	return nil
}
