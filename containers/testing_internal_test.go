package containers

import (
	"errors"
	"fmt"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/stretchr/testify/assert"
)

// TestDockerVerdict_ParsesCIAsABoolean: CI systems spell "true" in several
// ways; each must make a missing engine a failure, and only an unset or
// false CI may skip.
func TestDockerVerdict_ParsesCIAsABoolean(t *testing.T) {
	cause := errors.New("docker daemon unreachable")
	tests := []struct {
		ci        string
		wantFatal bool
		wantHint  string
	}{
		{"true", true, "makes a missing engine a failure"},
		{"1", true, "CI=1 makes a missing engine a failure"},
		{"TRUE", true, "CI=TRUE makes a missing engine a failure"},
		{"True", true, "makes a missing engine a failure"},
		{"t", true, "makes a missing engine a failure"},
		{" true\n", true, "makes a missing engine a failure"},
		{"yes", true, `CI="yes" is not a boolean`},
		{"", false, "set CI=true to make this a failure"},
		{"   ", false, "set CI=true to make this a failure"},
		{"false", false, "set CI=true to make this a failure"},
		{"0", false, "set CI=true to make this a failure"},
		{"FALSE", false, "set CI=true to make this a failure"},
	}
	for _, tt := range tests {
		t.Run(tt.ci, func(t *testing.T) {
			fatal, msg := dockerVerdict(cause, tt.ci)
			assert.Equal(t, tt.wantFatal, fatal)
			assert.Contains(t, msg, "docker not available: "+cause.Error())
			assert.Contains(t, msg, tt.wantHint)
		})
	}
}

// TestWithoutNotFound keeps every error of a termination but the engine's
// "no such container".
func TestWithoutNotFound(t *testing.T) {
	gone := cerrdefs.ErrNotFound.WithMessage("No such container: abc")
	other := errors.New("hook failed")
	tests := []struct {
		name string
		in   error
		want error
	}{
		{"nil", nil, nil},
		{"not found", gone, nil},
		{"wrapped not found", fmt.Errorf("stop: %w", gone), nil},
		{"joined, only not found", errors.Join(nil, gone, nil), nil},
		{"joined with another", errors.Join(gone, other), other},
		{"another", other, other},
	}
	for _, tt := range tests {
		got := withoutNotFound(tt.in)
		if tt.want == nil {
			assert.NoError(t, got, tt.name)
			continue
		}
		assert.ErrorIs(t, got, tt.want, tt.name)
		assert.NotErrorIs(t, got, cerrdefs.ErrNotFound, tt.name)
	}
}
