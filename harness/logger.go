package harness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// logHandler writes log records as k6 does, one record per Write:
//
//	INFO[0003] drained: 42 requests  source=console
//
// The number is seconds into the test run. The message is written as it
// is, so that a JS stack trace keeps its lines; attributes follow on its
// last line, quoted only when they would not read as one word.
type logHandler struct {
	w      io.Writer
	level  slog.Leveler
	since  func() time.Duration
	prefix string // attributes of WithAttrs, already formatted
	group  string // key prefix from WithGroup, "" or ending in "."
}

func newLogHandler(w io.Writer, level slog.Leveler, since func() time.Duration) *logHandler {
	return &logHandler{w: w, level: level, since: since}
}

// Enabled reports whether records at l are written.
func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

// Handle writes r on one line (more if the message has several).
func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s[%04d] %s", levelLabel(r.Level), int64(h.since()/time.Second), strings.TrimRight(r.Message, "\n"))
	attrs := h.prefix
	r.Attrs(func(a slog.Attr) bool {
		attrs += formatAttr(h.group, a)
		return true
	})
	if attrs != "" {
		b.WriteString(" ")
		b.WriteString(attrs)
	}
	b.WriteByte('\n')
	_, err := io.WriteString(h.w, b.String())
	return err
}

// WithAttrs returns a handler that adds attrs to every record.
func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	for _, a := range attrs {
		c.prefix += formatAttr(h.group, a)
	}
	return &c
}

// WithGroup returns a handler that qualifies later keys with name.
func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group += name + "."
	return &c
}

// levelLabel is k6's four-letter level name.
func levelLabel(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "ERRO"
	case l >= slog.LevelWarn:
		return "WARN"
	case l >= slog.LevelInfo:
		return "INFO"
	}
	return "DEBU"
}

// formatAttr renders " key=value" (groups flattened to "g.key").
func formatAttr(group string, a slog.Attr) string {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return ""
	}
	if a.Value.Kind() == slog.KindGroup {
		var s string
		g := group
		if a.Key != "" {
			g += a.Key + "."
		}
		for _, ga := range a.Value.Group() {
			s += formatAttr(g, ga)
		}
		return s
	}
	return " " + group + a.Key + "=" + quoteIfNeeded(a.Value.String())
}

// quoteIfNeeded quotes s when it is empty or holds spaces, quotes, "=" or
// control characters, so that key=value pairs stay unambiguous.
func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \"=") || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
