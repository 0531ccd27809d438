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
	defer l.mu.Unlock()
	if rec, ok := l.goMods[specifier]; ok {
		return rec, nil
	}
	mod, ok := l.builtin[specifier]
	if !ok {
		mod, ok = lookupModule(specifier)
	}
	if !ok {
		return nil, fmt.Errorf("unknown module %q: not a relative path (./, ../, /) and not a built-in or registered module", specifier)
	}
	rec := &goModuleRecord{path: specifier, mod: mod, l: l}
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

func (l *loader) vuFor(rt *sobek.Runtime) *vu {
	v, ok := l.vus.Load(rt)
	if !ok {
		return nil
	}
	return v.(*vu)
}

// goModuleRecord adapts a Module to sobek's cyclic module record so that
// ES imports of Go modules link like any other module.
type goModuleRecord struct {
	path  string
	mod   Module
	l     *loader
	mu    sync.Mutex
	names []string
}

var (
	_ sobek.CyclicModuleRecord   = (*goModuleRecord)(nil)
	_ sobek.CyclicModuleInstance = (*goModuleInstance)(nil)
)

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

// ResolveExport accepts every name: a Go module's exports are only known
// once it is instantiated for a runtime; missing names read as undefined.
func (g *goModuleRecord) ResolveExport(name string, _ ...sobek.ResolveSetElement) (*sobek.ResolvedBinding, bool) {
	return &sobek.ResolvedBinding{Module: g, BindingName: name}, false
}

func (g *goModuleRecord) Link() error { return nil }

func (g *goModuleRecord) Evaluate(rt *sobek.Runtime) *sobek.Promise {
	return rt.CyclicModuleRecordEvaluate(g, g.l.resolve)
}

func (g *goModuleRecord) RequestedModules() []string { return nil }

func (g *goModuleRecord) InitializeEnvironment() error { return nil }

func (g *goModuleRecord) Instantiate(rt *sobek.Runtime) (sobek.CyclicModuleInstance, error) {
	v := g.l.vuFor(rt)
	if v == nil {
		return nil, fmt.Errorf("module %q: runtime has no VU", g.path)
	}
	inst := g.mod.NewModuleInstance(v)
	if inst == nil {
		return nil, fmt.Errorf("module %q: NewModuleInstance returned nil", g.path)
	}
	b := exportsToBindings(rt, inst.Exports())
	g.mu.Lock()
	if g.names == nil {
		g.names = bindingNames(b)
	}
	g.mu.Unlock()
	return &goModuleInstance{bindings: b}, nil
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
