package harness

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/grafana/sobek"
)

// loader resolves import specifiers to module records. Source modules are
// parsed and compiled once and shared by every VU runtime; Go-backed modules
// get one instance per runtime.
type loader struct {
	mu      sync.Mutex
	files   map[string]*fileEntry // absolute path -> parsed module
	paths   map[sobek.ModuleRecord]string
	goMods  map[string]*goModuleRecord
	vus     sync.Map // *sobek.Runtime -> *vu
	builtin map[string]Module
	// refuse, when set, rejects an import the run cannot support; the
	// first refusal is kept in refused, for the exit code.
	refuse  func(specifier string) error
	refused error
	// primary is the VU whose runtime instantiates each Go module as soon
	// as the module is first resolved (while the script links), so that
	// the module's export names are known before any namespace object or
	// named import needs them.
	primary *vu
}

type fileEntry struct {
	rec *sobek.SourceTextModuleRecord
	err error
}

func newLoader(builtin map[string]Module) *loader {
	return &loader{
		files:   map[string]*fileEntry{},
		paths:   map[sobek.ModuleRecord]string{},
		goMods:  map[string]*goModuleRecord{},
		builtin: builtin,
	}
}

// resolve is the sobek HostResolveImportedModule hook.
func (l *loader) resolve(referrer any, specifier string) (sobek.ModuleRecord, error) {
	if isRelativeSpecifier(specifier) {
		base := ""
		if rec, ok := referrer.(sobek.ModuleRecord); ok {
			l.mu.Lock()
			base = l.paths[rec]
			l.mu.Unlock()
		}
		return l.loadFile(resolvePath(base, specifier))
	}
	l.mu.Lock()
	if rec, ok := l.goMods[specifier]; ok {
		l.mu.Unlock()
		return rec, nil
	}
	mod, ok := l.builtin[specifier]
	primary := l.primary
	refuse := l.refuse
	l.mu.Unlock()
	if refuse != nil {
		if err := refuse(specifier); err != nil {
			l.mu.Lock()
			if l.refused == nil {
				l.refused = err
			}
			l.mu.Unlock()
			return nil, err
		}
	}
	if !ok {
		mod, ok = lookupModule(specifier)
	}
	if !ok {
		return nil, fmt.Errorf("unknown module %q: not a relative path (./, ../, /) and not a built-in or registered module", specifier)
	}
	rec := &goModuleRecord{path: specifier, mod: mod, l: l}
	if primary != nil {
		if err := rec.instantiateEarly(primary); err != nil {
			return nil, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.goMods[specifier]; ok { // resolved concurrently: keep the first
		return prev, nil
	}
	l.goMods[specifier] = rec
	return rec, nil
}

// resolvePath resolves specifier against the file base (the importing
// module), or the working directory when base is empty.
func resolvePath(base, specifier string) string {
	if strings.HasPrefix(specifier, "file://") {
		if u, err := url.Parse(specifier); err == nil {
			return filepath.Clean(u.Path)
		}
	}
	if filepath.IsAbs(specifier) {
		return filepath.Clean(specifier)
	}
	dir := "."
	if base != "" {
		dir = filepath.Dir(base)
	}
	p, err := filepath.Abs(filepath.Join(dir, specifier))
	if err != nil {
		return filepath.Join(dir, specifier)
	}
	return p
}

// loadFile parses the module at the absolute path once; later calls return
// the cached record (or the cached error).
func (l *loader) loadFile(path string) (sobek.ModuleRecord, error) {
	l.mu.Lock()
	if e, ok := l.files[path]; ok {
		l.mu.Unlock()
		if e.err != nil {
			return nil, e.err
		}
		return e.rec, nil
	}
	l.mu.Unlock()
	src, err := os.ReadFile(path)
	var rec *sobek.SourceTextModuleRecord
	if err != nil {
		err = fmt.Errorf("loading module: %w", err)
	} else {
		rec, err = sobek.ParseModule(fileURL(path), string(src), l.resolve)
		if err != nil {
			err = fmt.Errorf("parsing %s: %w", path, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.files[path]; ok { // lost a race with another VU: keep the first
		if e.err != nil {
			return nil, e.err
		}
		return e.rec, nil
	}
	l.files[path] = &fileEntry{rec: rec, err: err}
	if err != nil {
		return nil, err
	}
	l.paths[rec] = path
	return rec, nil
}

func fileURL(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}

// pathOf returns the file a source module was loaded from.
func (l *loader) pathOf(rec sobek.ModuleRecord) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.paths[rec]
	return p, ok
}

// setPrimary sets (or, with nil, clears) the VU that instantiates Go
// modules as they are resolved.
func (l *loader) setPrimary(v *vu) {
	l.mu.Lock()
	l.primary = v
	l.mu.Unlock()
}

func (l *loader) vuFor(rt *sobek.Runtime) *vu {
	v, ok := l.vus.Load(rt)
	if !ok {
		return nil
	}
	return v.(*vu)
}

// goModuleRecord adapts a Module to sobek's cyclic module record so that
// ES imports of Go modules link like any other module.
//
// sobek asks a module for its export names (namespace objects, named
// imports) before it instantiates the module in a runtime, while a Go
// module only learns its exports from an instance. So the record is
// instantiated in the primary VU's runtime (VU 0) the moment it is first
// resolved, and that instance is handed to VU 0 when its runtime gets to
// it: every module gets exactly one NewModuleInstance call per VU, and the
// names are fixed before linking, for built-in and plugin modules alike.
type goModuleRecord struct {
	path string
	mod  Module
	l    *loader

	mu        sync.Mutex
	names     []string // sorted; nil until the first instance exists
	known     map[string]bool
	early     *goModuleInstance // the primary VU's instance, until it is claimed
	earlyRT   *sobek.Runtime
	earlyUsed bool
}

var (
	_ sobek.CyclicModuleRecord   = (*goModuleRecord)(nil)
	_ sobek.CyclicModuleInstance = (*goModuleInstance)(nil)
)

// instantiateEarly creates the primary VU's instance and records the export
// names. A panicking NewModuleInstance (a plugin throwing from its
// constructor) becomes an error naming the module.
func (g *goModuleRecord) instantiateEarly(v *vu) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("module %q: initialising it failed: %v", g.path, panicText(r))
		}
	}()
	inst, err := g.newInstance(v)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.early, g.earlyRT = inst, v.rt
	g.mu.Unlock()
	return nil
}

// panicText renders a recovered value; JS errors keep their message.
func panicText(r any) string {
	switch e := r.(type) {
	case *sobek.Object:
		return e.String()
	case error:
		return exceptionText(e)
	}
	return fmt.Sprint(r)
}

func (g *goModuleRecord) newInstance(v *vu) (*goModuleInstance, error) {
	inst := g.mod.NewModuleInstance(v)
	if inst == nil {
		return nil, fmt.Errorf("module %q: NewModuleInstance returned nil", g.path)
	}
	b := exportsToBindings(v.rt, inst.Exports())
	g.mu.Lock()
	if g.names == nil {
		g.names = bindingNames(b)
		g.known = make(map[string]bool, len(g.names))
		for _, n := range g.names {
			g.known[n] = true
		}
	}
	g.mu.Unlock()
	return &goModuleInstance{bindings: b}, nil
}

func (g *goModuleRecord) GetExportedNames(cb func([]string), _ ...sobek.ModuleRecord) bool {
	g.mu.Lock()
	names := g.names
	g.mu.Unlock()
	if names == nil {
		names = []string{"default"}
	}
	cb(names)
	return true
}

// ResolveExport resolves the names the module's first instance exported;
// any other name is unresolvable, which sobek reports as a SyntaxError
// naming the export and the module when the script links.
func (g *goModuleRecord) ResolveExport(name string, _ ...sobek.ResolveSetElement) (*sobek.ResolvedBinding, bool) {
	g.mu.Lock()
	known := g.known
	g.mu.Unlock()
	if known != nil && !known[name] {
		return nil, false
	}
	return &sobek.ResolvedBinding{Module: g, BindingName: name}, false
}

func (g *goModuleRecord) Link() error { return nil }

func (g *goModuleRecord) Evaluate(rt *sobek.Runtime) *sobek.Promise {
	return rt.CyclicModuleRecordEvaluate(g, g.l.resolve)
}

func (g *goModuleRecord) RequestedModules() []string { return nil }

func (g *goModuleRecord) InitializeEnvironment() error { return nil }

func (g *goModuleRecord) Instantiate(rt *sobek.Runtime) (sobek.CyclicModuleInstance, error) {
	g.mu.Lock()
	if g.earlyRT == rt && !g.earlyUsed {
		inst := g.early
		g.early, g.earlyUsed = nil, true
		g.mu.Unlock()
		return inst, nil
	}
	g.mu.Unlock()
	v := g.l.vuFor(rt)
	if v == nil {
		return nil, fmt.Errorf("module %q: runtime has no VU", g.path)
	}
	return g.newInstance(v)
}

type goModuleInstance struct {
	bindings map[string]sobek.Value
}

func (i *goModuleInstance) GetBindingValue(name string) sobek.Value {
	if v, ok := i.bindings[name]; ok {
		return v
	}
	return sobek.Undefined()
}

func (i *goModuleInstance) HasTLA() bool { return false }

func (i *goModuleInstance) ExecuteModule(*sobek.Runtime, func(any) error, func(any) error) (sobek.CyclicModuleInstance, error) {
	return i, nil
}

// refusal is the first import refused by l.refuse, or nil.
func (l *loader) refusal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}
