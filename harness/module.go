package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/metrics"
)

// Module is a Go-backed JavaScript module that scripts import by path, the
// way xk6 extensions do. NewModuleInstance is called once per VU runtime
// (including VU 0, which reads options and runs setup, teardown and
// handleSummary) when a script imports the module.
type Module interface {
	NewModuleInstance(vu VU) ModuleInstance
}

// ModuleInstance is one VU's view of a Module.
type ModuleInstance interface {
	// Exports returns the JS values the module exports. It is called once,
	// right after NewModuleInstance.
	Exports() Exports
}

// Exports lists what a module exposes to `import`. Default is the default
// export; Named holds the named exports. When Named is nil and Default is
// an object, the object's own properties also serve as named exports; when
// Default is nil, an object holding the named exports becomes the default.
// Values are converted with the VU's Runtime().ToValue.
type Exports struct {
	Default any
	Named   map[string]any
}

// ModuleFunc adapts a plain function to Module.
type ModuleFunc func(vu VU) ModuleInstance

// NewModuleInstance calls f.
func (f ModuleFunc) NewModuleInstance(vu VU) ModuleInstance { return f(vu) }

// ExportsFunc adapts a plain function to ModuleInstance.
type ExportsFunc func() Exports

// Exports calls f.
func (f ExportsFunc) Exports() Exports { return f() }

// VU is what a module instance knows about the virtual user it belongs to.
// All methods are meant to be called on the VU's own goroutine (the one
// running its JS), except where noted.
type VU interface {
	// Runtime is the VU's JavaScript runtime. It is not safe for use from
	// other goroutines: hand results back through RegisterCallback.
	Runtime() *sobek.Runtime
	// Context is cancelled when the VU's current work must stop: the end of
	// the iteration's scenario (after gracefulStop), of setup/teardown, or
	// of the test. Call it on the VU goroutine; the context it returns may
	// be watched from any goroutine.
	Context() context.Context
	// ID is the VU's id in the test (exec.vu.idInTest): 1..N for VUs that
	// run iterations, 0 for the VU that runs init for options, setup,
	// teardown and handleSummary.
	ID() uint64
	// InInit reports whether the VU is running the script's init context
	// (top-level module code), where modules may register metrics and
	// create long-lived objects.
	InInit() bool
	// Registry is the test's metric registry. Register metrics from
	// NewModuleInstance or init code so thresholds can refer to them.
	Registry() *metrics.Registry
	// Tags returns the VU's current tag set (options.tags, scenario tags,
	// exec.vu.metrics.tags, scenario and group).
	Tags() metrics.Tags
	// Push emits one sample of m with the VU's current tags plus extra
	// (which win on conflict). Samples pushed in the init context or after
	// the VU's context is done are dropped, as k6's PushIfNotDone does.
	// Call it on the VU goroutine (from other goroutines, inside a
	// RegisterCallback function).
	Push(m *metrics.Metric, value float64, extra map[string]string)
	// PushTagged is Push with the extra tags as a tag set built once
	// (metrics.NewTags): the merge with the VU's tags is cached, so a
	// plugin that pushes many samples per call pays for it once per tag
	// combination rather than per sample.
	PushTagged(m *metrics.Metric, value float64, extra metrics.Tags)
	// RegisterCallback reserves a slot in the VU's event loop and returns
	// the function that fills it. The iteration (or init, setup...) does not
	// end until every reserved slot has been filled and its function run on
	// the VU goroutine. Call RegisterCallback on the VU goroutine; call the
	// returned function exactly once, from any goroutine. A callback's error
	// ends the iteration as an exception.
	RegisterCallback() func(func() error)
	// Run is the test run the VU belongs to, shared by all its VUs: the
	// place for state and resources that live as long as the run.
	Run() RunContext
	// Clock is the run's clock (safe from any goroutine). A module that
	// reads the time or makes the VU wait for something that needs time
	// to pass uses it: under `--clock virtual` the wall clock stands
	// still and only this one moves. See Clock and Gate.
	Clock() Clock
	// WhenWaiting registers f to run once, on the VU goroutine, the next
	// time the VU waits: in sleep(), for a promise or timer to settle, or
	// between iterations when its executor does not start the next one at
	// once. A plugin that holds simulated time still while a VU acts on a
	// result releases it there.
	WhenWaiting(f func())
}

// RunContext is one test run (one call of Run) as plugins see it. Its
// methods are safe for concurrent use from any goroutine.
type RunContext interface {
	// ID tells runs apart: every run in the process has its own, never
	// reused. Key per-run plugin state by it.
	ID() uint64
	// OnEnd registers f to be called once when the run ends: after
	// teardown and the end-of-test summary, and also when the run was
	// aborted, interrupted by a signal or failed in the init context, so
	// that resources the run created are always released. Every VU has
	// stopped by then. Functions run in reverse order of registration on
	// the goroutine that called Run; a panic in one is logged and the
	// others still run.
	OnEnd(f func())
	// AddSummarySection adds a section that f writes after this run's
	// text summary (after the sections of RegisterSummaryHook), in the
	// order added. Like the text summary, sections are not written when
	// the script's handleSummary replaces it. Another run never sees them.
	AddSummarySection(f func(w io.Writer))
}

// ErrInitContext is what a module function reports when a script calls it
// in the init context (top-level code), where k6 allows no network or other
// I/O: init runs once per VU, before the test, and is not measured.
var ErrInitContext = errors.New("not allowed in the init context (top-level code); call it from setup(), an exec function such as default, or teardown()")

// NotInInit returns an error wrapping ErrInitContext, naming what was
// called, when vu is running the script's init context, and nil otherwise.
// Module functions that do I/O call it first and throw the error, which
// fails the test with exit code 107 as k6 modules do:
//
//	if err := harness.NotInInit(vu, "cluster.generate"); err != nil {
//		panic(vu.Runtime().NewGoError(err))
//	}
func NotInInit(vu VU, what string) error {
	if vu.InInit() {
		return fmt.Errorf("%s: %w", what, ErrInitContext)
	}
	return nil
}

var (
	registryMu sync.RWMutex
	modules    = map[string]Module{}
	hooks      []SummaryHook
)

// Register makes m importable by scripts under importPath (e.g.
// "k6/x/mocker"). It panics when the path is empty or taken: registration
// happens in init functions, where a duplicate is a programming error.
func Register(importPath string, m Module) {
	if importPath == "" || m == nil {
		panic("harness: Register needs an import path and a module")
	}
	if isBuiltinModule(importPath) {
		panic(fmt.Sprintf("harness: module %q is built in", importPath))
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := modules[importPath]; dup {
		panic(fmt.Sprintf("harness: module %q registered twice", importPath))
	}
	modules[importPath] = m
}

func lookupModule(path string) (Module, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	m, ok := modules[path]
	return m, ok
}

// SummaryHook writes an extra section after the end-of-test text summary
// (it is not called when the script's handleSummary replaces that summary).
type SummaryHook func(w io.Writer)

// RegisterSummaryHook adds h to the hooks run after the text summary of
// every run in the process, in registration order. A section about what
// one run did belongs in RunContext.AddSummarySection instead, which keeps
// concurrent runs apart.
func RegisterSummaryHook(h SummaryHook) {
	registryMu.Lock()
	defer registryMu.Unlock()
	hooks = append(hooks, h)
}

func summaryHooks() []SummaryHook {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return append([]SummaryHook(nil), hooks...)
}

func isBuiltinModule(path string) bool {
	switch path {
	case "k6", "k6/metrics", "k6/execution", "k6/timers", "k6/data", "k6/encoding", "k6/crypto", "k6/http", "k6/x/sse", "k6/experimental/sse":
		return true
	}
	return false
}

// exportsToBindings converts a module instance's exports into the values
// bound to each import name in rt.
func exportsToBindings(rt *sobek.Runtime, ex Exports) map[string]sobek.Value {
	b := make(map[string]sobek.Value, len(ex.Named)+1)
	for k, v := range ex.Named {
		b[k] = rt.ToValue(v)
	}
	switch {
	case ex.Default != nil:
		def := rt.ToValue(ex.Default)
		b["default"] = def
		if ex.Named == nil {
			if obj, ok := def.(*sobek.Object); ok {
				for _, k := range obj.Keys() {
					b[k] = obj.Get(k)
				}
			}
		}
	default:
		obj := rt.NewObject()
		keys := make([]string, 0, len(ex.Named))
		for k := range ex.Named {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			_ = obj.Set(k, b[k])
		}
		b["default"] = obj
	}
	return b
}

func bindingNames(b map[string]sobek.Value) []string {
	out := make([]string, 0, len(b))
	for k := range b {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func isRelativeSpecifier(s string) bool {
	return strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "file://")
}
