package harness

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// ProgressRun is implemented by the RunContext of every run, reached with a
// type assertion as SummaryDataRun is.
type ProgressRun interface {
	// AddProgress adds f's text below the scenario rows of this run's
	// progress display, each time it is drawn, one display line per line
	// of text; an empty text adds nothing. f is called from the display's
	// goroutine while the scenarios run, so it must be quick and safe for
	// concurrent use.
	AddProgress(f func() string)
}

// SummaryObserverRun is implemented by the RunContext of every run.
type SummaryObserverRun interface {
	// OnSummaryData registers f to be called once with this run's
	// end-of-test data (the object handleSummary receives, the plugins'
	// keys included) as soon as it is built: after teardown, before
	// handleSummary or the text summary, also when the run was interrupted.
	// f must not modify data. A panic in f is logged and the summary is
	// still written.
	OnSummaryData(f func(data map[string]any))
}

// pluginHooks keeps the hooks of ProgressRun and SummaryObserverRun.
type pluginHooks struct {
	hookMu    sync.Mutex
	progress  []func() string
	observers []func(map[string]any)
}

// AddProgress implements ProgressRun.
func (h *pluginHooks) AddProgress(f func() string) {
	if f == nil {
		return
	}
	h.hookMu.Lock()
	h.progress = append(h.progress, f)
	h.hookMu.Unlock()
}

// OnSummaryData implements SummaryObserverRun.
func (h *pluginHooks) OnSummaryData(f func(data map[string]any)) {
	if f == nil {
		return
	}
	h.hookMu.Lock()
	h.observers = append(h.observers, f)
	h.hookMu.Unlock()
}

// progressLines returns the plugins' progress text, split into lines.
func (h *pluginHooks) progressLines() []string {
	h.hookMu.Lock()
	fns := slices.Clone(h.progress)
	h.hookMu.Unlock()
	var out []string
	for _, f := range fns {
		if s := strings.TrimRight(f(), "\n"); s != "" {
			out = append(out, strings.Split(s, "\n")...)
		}
	}
	return out
}

// observeSummaryData hands data to the observers; a panicking observer is
// reported through logError.
func (h *pluginHooks) observeSummaryData(data map[string]any, logError func(msg string, args ...any)) {
	h.hookMu.Lock()
	fns := slices.Clone(h.observers)
	h.hookMu.Unlock()
	for _, f := range fns {
		func() {
			defer func() {
				if r := recover(); r != nil {
					logError("a plugin's summary data observer panicked", "panic", fmt.Sprint(r))
				}
			}()
			f(data)
		}()
	}
}
