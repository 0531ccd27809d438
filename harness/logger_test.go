package harness

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLogHandler_WritesK6StyleLines(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := slog.New(newLogHandler(&out, slog.LevelInfo, func() time.Duration { return 3700 * time.Millisecond }))

	log.Info("drained: 42 requests", "source", "console")
	log.Debug("not shown at the info level")
	log.Error("Error: boom\n\tat default (file:///s.js:2:36(3))", "executor", "shared-iterations", "scenario", "default")
	log.Warn("odd values", "empty", "", "spaced", "a b", "eq", "k=v", "err", errors.New("x"), "n", 7)
	log.With("scenario", "ramp").WithGroup("vu").Info("grouped", "id", 3, slog.Group("it", "n", 1))

	assert.Equal(t, ""+
		"INFO[0003] drained: 42 requests  source=console\n"+
		"ERRO[0003] Error: boom\n"+
		"\tat default (file:///s.js:2:36(3))  executor=shared-iterations scenario=default\n"+
		"WARN[0003] odd values  empty=\"\" spaced=\"a b\" eq=\"k=v\" err=x n=7\n"+
		"INFO[0003] grouped  scenario=ramp vu.id=3 vu.it.n=1\n",
		out.String())
}
