package harness

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// progress shows per-scenario state on stderr: redrawn in place on a
// terminal, as periodic plain lines otherwise.
type progress struct {
	t        *testRun
	w        io.Writer
	tty      bool
	interval time.Duration
	drawn    int // lines drawn last time (terminal mode)
}

func newProgress(t *testRun) *progress {
	p := &progress{t: t, w: &lockedWriter{mu: &t.stderrMu, w: t.cfg.Stderr}, tty: t.cfg.StderrTTY, interval: t.cfg.ProgressInterval}
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
			p.draw(true)
			return
		case <-tick.C:
			p.draw(false)
		}
	}
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
	return out
}

func (p *progress) draw(final bool) {
	lines := p.lines()
	var b strings.Builder
	if p.tty {
		if p.drawn > 0 {
			fmt.Fprintf(&b, "\x1b[%dA", p.drawn) // back to the first line drawn
		}
		for _, l := range lines {
			b.WriteString("\r\x1b[2K")
			b.WriteString(l)
			b.WriteByte('\n')
		}
		p.drawn = len(lines)
	} else {
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	if final && !p.tty {
		b.WriteByte('\n')
	}
	_, _ = io.WriteString(p.w, b.String())
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
