//go:build linux

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oversizeEnv names the input a child process of
// TestOversizedInputs_FailWithinMemory runs.
const oversizeEnv = "MOCKER_OVERSIZE_INPUT"

// maxOversizeRSSKB bounds the child's peak resident memory: the test
// binary itself takes a few tens of MB, an allocation in proportion to any
// of the inputs takes gigabytes. Under the race detector, whose shadow
// memory multiplies every process's footprint, the bound is 600 MB: still
// far below what any of the inputs would allocate.
func maxOversizeRSSKB() int64 {
	if raceEnabled {
		return 600 << 10
	}
	return 200 << 10
}

var oversizeInputs = map[string]struct {
	run  func() error
	want string
}{
	"prompt_tokens 2147483647": {func() error {
		c, err := New(Config{})
		if err != nil {
			return err
		}
		defer c.Close()
		res := c.Generate(context.Background(), Request{PromptTokens: 2147483647})
		return fmt.Errorf("%s: %s", res.Outcome, res.Error)
	}, "error: prompt_tokens: want an integer in [1, 4194304], got 2147483647"},
	"num_gpu_blocks 2e9": {func() error {
		cfg, err := ConfigFromMap(map[string]any{"args": map[string]any{"num_gpu_blocks": 2e9}})
		if err != nil {
			return err
		}
		_, err = New(cfg)
		return err
	}, "args.num_gpu_blocks: 2000000000 blocks × 2 workers"},
	"workers 100000": {func() error {
		_, err := New(Config{Workers: 100000})
		return err
	}, "workers: want an integer in [1, 1024], got 100000"},
}

// TestOversizedInputs_FailWithinMemory runs each oversized input in a
// child process and checks that it ends in its config or request error
// with the child's peak RSS under 200 MB: the bound is checked before
// anything in proportion to the input is allocated.
func TestOversizedInputs_FailWithinMemory(t *testing.T) {
	if name := os.Getenv(oversizeEnv); name != "" {
		in, ok := oversizeInputs[name]
		require.True(t, ok, name)
		err := in.run()
		fmt.Printf("RESULT %v\n", err)
		return
	}
	t.Parallel()
	for name, in := range oversizeInputs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestOversizedInputs_FailWithinMemory$", "-test.count=1")
			cmd.Env = append(os.Environ(), oversizeEnv+"="+name)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "RESULT "+in.want)
			ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			require.True(t, ok)
			t.Logf("%s: peak RSS %d MB, CPU %v", name, ru.Maxrss>>10, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
			assert.Less(t, ru.Maxrss, maxOversizeRSSKB(), "peak RSS in kB")
			assert.False(t, strings.Contains(string(out), "out of memory"))
		})
	}
}
