//go:build linux

package xk6mocker

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const oversizeEnv = "MOCKER_OVERSIZE_INPUT"

// TestOversizedRequests_FailWithinMemory sends oversized requests from a
// script in a child process and checks each ends in its error with the
// child's peak RSS under 200 MB (the limit the module must keep; a copy in
// proportion to the input takes gigabytes).
func TestOversizedRequests_FailWithinMemory(t *testing.T) {
	if in := os.Getenv(oversizeEnv); in != "" {
		res := runScript(t, "oversize.js", map[string]string{"INPUT": in})
		require.Equal(t, 0, res.code, res.stderr)
		os.Stderr.WriteString(res.stderr)
		return
	}
	tests := []struct {
		input string
		want  string
	}{
		{"prompt_tokens", "RESULT Error: generate: prompt_tokens: want an integer in [1, 4194304], got 2147483647"},
		{"tokens", "RESULT Error: generate: tokens: want at most 4194304 token ids, got 10000000"},
	}
	for _, tt := range tests {
		t.Run(tt.input, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestOversizedRequests_FailWithinMemory$", "-test.count=1")
			cmd.Env = append(os.Environ(), oversizeEnv+"="+tt.input)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), tt.want)
			ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			require.True(t, ok)
			t.Logf("%s: peak RSS %d MB, CPU %v", tt.input, ru.Maxrss>>10, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
			// Under the race detector, whose shadow memory multiplies every
			// footprint, 600 MB: still far below what the input would take.
			limit := int64(200 << 10)
			if raceEnabled {
				limit = 600 << 10
			}
			assert.Less(t, ru.Maxrss, limit, "peak RSS in kB")
		})
	}
}
