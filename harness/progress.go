package harness

import (
	"context"
	"fmt"
	"io"
	"math"
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
		d = max(d, s.cfg.StartTime+s.cfg.TotalDuration())
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
	when := clock(t.elapsed())
	switch {
	case t.vclock != nil && t.vclock.Paced():
		if lag, _ := t.vclock.Lag(); lag >= lagShown {
			when = fmt.Sprintf("%s, %s behind the wall clock", when, clock(lag))
		}
	case t.vclock != nil:
		when = fmt.Sprintf("%s virtual, %s", when, t.speedFactor())
	}
	out := []string{fmt.Sprintf("running (%s), %d/%d VUs, %d complete and %d interrupted iterations",
		when, t.vusActive.Load(), t.vusInitialized.Load(),
		t.iterationsCompleted.Load(), t.iterationsInterrupted.Load())}
	rows := make([][]string, 0, len(t.scenarios))
	for _, s := range t.scenarios {
		rows = append(rows, s.progressCells())
	}
	out = append(out, alignColumns(rows)...)
	out = append(out, t.progressLines()...)
	if p.width > 0 {
		for i, l := range out {
			out[i] = cut(l, p.width-1)
		}
	}
	return out
}

// progressCells is one scenario's row of the progress display: name, share
// done, state, time, VUs, iterations, then the rate and drops once there is
// something to say.
func (s *scenarioRun) progressCells() []string {
	el := s.elapsed()
	state := "waiting"
	switch {
	case s.stopped.Load():
		state = "stopped"
	case s.finished.Load():
		state = "done"
	case s.started.Load():
		state = "running"
	}
	var when, iters string
	if planned := s.cfg.PlannedIterations(); planned > 0 {
		// the iteration count is the plan; maxDuration is only a cap
		when = clock(el)
		iters = fmt.Sprintf("%d/%d iters", s.completed.Load(), planned)
	} else {
		total := clock(s.cfg.TotalDuration())
		when = fmt.Sprintf("%*s/%s", len(total), clock(min(el, s.cfg.TotalDuration())), total)
		iters = fmt.Sprintf("%d iters", s.completed.Load())
	}
	// The share is floored so that 100% means all is done; the state is
	// padded to the longest state so that a lone row does not shift.
	cells := []string{
		s.cfg.Name,
		fmt.Sprintf("[%3.0f%%]", math.Floor(s.share()*100)),
		fmt.Sprintf("%-7s", state),
		when,
		fmt.Sprintf("%d/%d VUs", s.active.Load(), s.cfg.PeakVUs()),
		iters,
	}
	// a rate over less than a second of work says little and jumps about
	if el >= time.Second {
		cells = append(cells, fmt.Sprintf("%.1f it/s", float64(s.completed.Load())/el.Seconds()))
	}
	if d := s.dropped.Load(); d > 0 {
		cells = append(cells, fmt.Sprintf("%d dropped", d))
	}
	return cells
}

// alignColumns pads every cell to the widest cell of its column, so that
// the rows of several scenarios read as a table.
func alignColumns(rows [][]string) []string {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		var b strings.Builder
		for j, c := range r {
			if j > 0 {
				b.WriteString("  ")
			}
			b.WriteString(c)
			if j < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[j]-utf8.RuneCountInString(c)))
			}
		}
		out[i] = b.String()
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

// clock writes d to a tenth of a second with a fixed number of digits
// after the largest unit ("4.2s", "1m05.0s", "1h02m03.0s"), so that a
// running clock does not make the line jitter.
func clock(d time.Duration) string {
	d = max(0, d).Round(100 * time.Millisecond)
	h, m := d/time.Hour, d%time.Hour/time.Minute
	sec := float64(d%time.Minute) / float64(time.Second)
	switch {
	case h > 0:
		return fmt.Sprintf("%dh%02dm%04.1fs", h, m, sec)
	case m > 0:
		return fmt.Sprintf("%dm%04.1fs", m, sec)
	}
	return fmt.Sprintf("%.1fs", sec)
}

// lagShown is the least lag of a paced clock the progress display shows.
const lagShown = 100 * time.Millisecond

// speedFactor says how much faster than the wall clock a virtual run goes:
// virtual time so far over wall time so far.
func (t *testRun) speedFactor() string {
	wall := time.Since(t.wallStart)
	if wall <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f× wall", float64(t.elapsed())/float64(wall))
}
