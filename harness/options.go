package harness

import (
	"math"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/options"
)

// Overrides are the CLI flags that take precedence over the script's
// options (see options.Overrides).
type Overrides = options.Overrides

// parseOptions is options.Parse with its errors as ExitInvalidConfig, their
// messages unchanged.
func parseOptions(raw []byte, ov Overrides) (*options.Options, error) {
	opts, err := options.Parse(raw, ov)
	if err != nil {
		return nil, &ExitError{Code: ExitInvalidConfig, Err: err}
	}
	return opts, nil
}

// checkFiniteOptions rejects NaN and ±Infinity anywhere in the options k6
// knows, naming the field (options.scenarios.s.rate). Keys that are not
// k6 options are ignored, as they are when parsed.
func checkFiniteOptions(opts sobek.Value) (err error) {
	defer func() {
		if recover() != nil {
			err = nil // a getter threw; JSON encoding will report it
		}
	}()
	obj, ok := opts.(*sobek.Object)
	if !ok {
		return nil
	}
	for _, k := range obj.Keys() {
		if !options.Known(k) {
			continue
		}
		if err := checkFinite(obj.Get(k), "options."+k, 0); err != nil {
			return err
		}
	}
	return nil
}

func checkFinite(v sobek.Value, path string, depth int) error {
	if v == nil || depth > 32 {
		return nil // deeper nesting than any option has; JSON reports cycles
	}
	if f, isNum := v.Export().(float64); isNum {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return exitErrorf(ExitInvalidConfig, "%s: must be a finite number, got %s", path, v.String())
		}
		return nil
	}
	obj, ok := v.(*sobek.Object)
	if !ok {
		return nil
	}
	if _, isFn := sobek.AssertFunction(v); isFn {
		return nil
	}
	isArray := obj.ClassName() == "Array"
	for _, k := range obj.Keys() {
		p := path + "." + k
		if isArray {
			p = path + "[" + k + "]"
		}
		if err := checkFinite(obj.Get(k), p, depth+1); err != nil {
			return err
		}
	}
	return nil
}
