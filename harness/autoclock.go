package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/grafana/sobek"
)

// TimeKeeper is implemented by a Module whose work runs on time that the
// run's clock drives: a simulation with modeled time of its own, such as
// k6/x/mocker's in-process cluster. Under ClockAuto (the command's
// default) a script that imports such a module runs on the paced clock,
// so that what it models does not depend on the host; a script that
// imports none runs on the wall clock, as k6 runs it.
type TimeKeeper interface {
	Module
	// KeepsTime reports whether the module keeps modeled time.
	KeepsTime() bool
}

// chooseClock is the clock ClockAuto picks for the script at path, and
// why, in words for the banner: paced when the script (or a module it
// imports, statically, from a file) imports a TimeKeeper, wall otherwise.
// A script that cannot be read or parsed gets the wall clock: loading it
// reports the error.
func chooseClock(path string) (ClockMode, string) {
	imports := staticImports(path)
	for _, spec := range imports {
		if m, ok := lookupModule(spec); ok {
			if tk, ok := m.(TimeKeeper); ok && tk.KeepsTime() {
				return ClockPaced, fmt.Sprintf("the script imports %s, which keeps modeled time", spec)
			}
		}
	}
	return ClockWall, "the script imports no module that keeps modeled time, so JavaScript time counts, as in k6"
}

// staticImports lists, sorted, the module specifiers that the script at
// path and the files it imports name in import declarations.
func staticImports(path string) []string {
	seen := map[string]bool{}
	var specs []string
	var visit func(file string)
	visit = func(file string) {
		if seen[file] {
			return
		}
		seen[file] = true
		src, err := os.ReadFile(file)
		if err != nil {
			return
		}
		rec, err := sobek.ParseModule(fileURL(file), string(src), func(any, string) (sobek.ModuleRecord, error) {
			return nil, fmt.Errorf("not resolved while scanning imports")
		})
		if err != nil {
			return
		}
		for _, spec := range rec.RequestedModules() {
			if isRelativeSpecifier(spec) {
				visit(resolvePath(file, spec))
				continue
			}
			if !slices.Contains(specs, spec) {
				specs = append(specs, spec)
			}
		}
	}
	if abs, err := filepath.Abs(path); err == nil {
		visit(abs)
	}
	slices.Sort(specs)
	return specs
}
