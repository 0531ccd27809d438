package harness

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/harness/options"
)

func TestParseOptions_InvalidConfigExitsWithTheFieldsMessage(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"scenarios":{"a":{"vus":1}}}`,
		`{"scenarios":{"a":{"executor":"constant-vus","duration":"1s","rate":3}}}`, // wrapped: names what the executor accepts
		`{"thresholds":{"x":[{"threshold":"count>1","abortOnFail":"yes"}]}}`,
	} {
		t.Run(raw, func(t *testing.T) {
			_, want := options.Parse([]byte(raw), Overrides{})
			require.Error(t, want)
			_, err := parseOptions([]byte(raw), Overrides{})
			assert.Equal(t, ExitInvalidConfig, ExitCode(err))
			assert.Equal(t, want.Error(), err.Error())
		})
	}
}
