package harness

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// stderrWriter is the one writer behind everything the harness prints on
// stderr: logs, console output, the progress display and handleSummary's
// "stderr" key. On a terminal it owns the progress block drawn at the
// bottom of the screen: any other write first erases the block, then
// writes its text, then redraws the block below it, so log lines scroll up
// above the progress display and are never drawn over.
type stderrWriter struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	block []string // lines of the progress block on screen (terminal only)
}

func newStderrWriter(w io.Writer, tty bool) *stderrWriter {
	return &stderrWriter{w: w, tty: tty}
}

// Write writes p above the progress block. Text written while the block is
// on screen always ends its line, so the block starts on a fresh one.
func (s *stderrWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.block) == 0 {
		return s.w.Write(p)
	}
	var b strings.Builder
	s.erase(&b)
	b.Write(p)
	if len(p) > 0 && p[len(p)-1] != '\n' {
		b.WriteByte('\n')
	}
	s.draw(&b)
	if _, err := io.WriteString(s.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// showBlock replaces the progress block. On a terminal the old block is
// erased and the new one drawn in its place; otherwise the lines are
// appended.
func (s *stderrWriter) showBlock(lines []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	if !s.tty {
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		_, _ = io.WriteString(s.w, b.String())
		return
	}
	s.erase(&b)
	s.block = append(s.block[:0], lines...)
	s.draw(&b)
	_, _ = io.WriteString(s.w, b.String())
}

// release leaves the block on screen as ordinary text: later writes go
// below it instead of replacing it.
func (s *stderrWriter) release() {
	s.mu.Lock()
	s.block = nil
	s.mu.Unlock()
}

// erase moves the cursor to the first line of the block and clears from
// there to the end of the screen.
func (s *stderrWriter) erase(b *strings.Builder) {
	if len(s.block) == 0 {
		return
	}
	fmt.Fprintf(b, "\x1b[%dA\r\x1b[J", len(s.block))
}

func (s *stderrWriter) draw(b *strings.Builder) {
	for _, l := range s.block {
		b.WriteString("\r\x1b[2K")
		b.WriteString(l)
		b.WriteByte('\n')
	}
}

// progress shows per-scenario state on stderr: redrawn in place on a
// terminal, as periodic plain lines otherwise.
type progress struct {
	t        *testRun
	out      *stderrWriter
	tty      bool
	width    int // terminal columns; 0 when unknown
	interval time.Duration
}

func newProgress(t *testRun) *progress {
	p := &progress{t: t, out: t.stderr, tty: t.cfg.StderrTTY, interval: t.cfg.ProgressInterval}
	if p.tty {
		p.width = t.cfg.TermWidth
	}
	if p.interval <= 0 {
		if p.tty {
			p.interval = 250 * time.Millisecond
		} else {
			// about five lines for short tests, one every 10 s for long ones
			p.interval = min(10*time.Second, max(time.Second, t.plannedDuration()/5))
		}
	}
	return p
}

// plannedDuration is the longest regular end of any scenario.
func (t *testRun) plannedDuration() time.Duration {
	var d time.Duration
	for _, s := range t.scenarios {
		d = max(d, s.cfg.StartTime+s.cfg.totalDuration())
	}
	return d
}

func (p *progress) run(ctx context.Context) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.out.showBlock(p.lines())
			p.out.release()
			if !p.tty {
				_, _ = io.WriteString(p.out, "\n")
			}
			return
		case <-tick.C:
			// Without a terminal every draw is new lines: once all the work
			// is done, leave the last picture to the final draw.
			if !p.tty && p.allDone() {
				continue
			}
			p.out.showBlock(p.lines())
		}
	}
}

// allDone reports whether every scenario has finished or reached the end of
// its planned work.
func (p *progress) allDone() bool {
	for _, s := range p.t.scenarios {
		if !s.finished.Load() && s.progress() < 1 {
			return false
		}
	}
	return true
}

func (p *progress) lines() []string {
	t := p.t
	out := []string{fmt.Sprintf("running (%s), %d/%d VUs, %d complete and %d interrupted iterations",
		fmtDur(t.elapsed()), t.vusActive.Load(), t.vusInitialized.Load(),
		t.iterationsCompleted.Load(), t.iterationsInterrupted.Load())}
	width := 0
	for _, s := range t.scenarios {
		width = max(width, len(s.cfg.Name))
	}
	for _, s := range t.scenarios {
		el := s.elapsed()
		state := "waiting"
		switch {
		case s.finished.Load():
			state = "done"
		case s.started.Load():
			state = "running"
		}
		rate := 0.0
		if el > 0 {
			rate = float64(s.completed.Load()) / el.Seconds()
		}
		line := fmt.Sprintf("%-*s [%3.0f%%] %-7s %s/%s  %d/%d VUs  %d iters  %.1f it/s",
			width, s.cfg.Name, s.progress()*100, state,
			fmtDur(min(el, s.cfg.totalDuration())), fmtDur(s.cfg.totalDuration()),
			s.active.Load(), s.cfg.maxVUs(), s.completed.Load(), rate)
		if d := s.dropped.Load(); d > 0 {
			line += fmt.Sprintf("  %d dropped", d)
		}
		out = append(out, line)
	}
	if p.width > 0 {
		for i, l := range out {
			out[i] = cut(l, p.width-1)
		}
	}
	return out
}

// cut shortens s to at most n runes, so that a line never wraps on the
// terminal (a wrapped line would break the cursor arithmetic of redraws).
func cut(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
