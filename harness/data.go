package harness

import (
	"errors"
	"fmt"
	"sync"

	"github.com/grafana/sobek"
)

// sharedArrays holds the SharedArrays of one run by name: each is built
// once, by the first VU whose init code reaches it, and read by all.
type sharedArrays struct {
	mu     sync.Mutex
	byName map[string]*sharedArray
}

// sharedArray is one SharedArray's elements, each as JSON: only strings
// cross runtimes, and every VU decodes what it reads.
type sharedArray struct {
	ready chan struct{} // closed once elems or err is set
	elems []string
	err   error
}

// get returns the array called name, building it with build when it is the
// first to ask.
func (s *sharedArrays) get(name string, build func() ([]string, error)) ([]string, error) {
	s.mu.Lock()
	if s.byName == nil {
		s.byName = map[string]*sharedArray{}
	}
	a, ok := s.byName[name]
	if !ok {
		a = &sharedArray{ready: make(chan struct{})}
		s.byName[name] = a
	}
	s.mu.Unlock()
	if ok {
		<-a.ready
		return a.elems, a.err
	}
	a.elems, a.err = build()
	close(a.ready)
	return a.elems, a.err
}

// newDataModule implements k6/data: SharedArray.
func newDataModule(h VU) ModuleInstance {
	v := h.(*vu)
	named := map[string]any{"SharedArray": v.newSharedArray}
	return ExportsFunc(func() Exports { return Exports{Named: named} })
}

// newSharedArray is `new SharedArray(name, fn)`: fn runs once per run and
// must return an array; every VU gets a read-only view of its elements
// (writes throw a TypeError, elements are frozen).
func (v *vu) newSharedArray(call sobek.ConstructorCall) *sobek.Object {
	rt := v.rt
	if !v.inInit {
		throwf(rt, "new SharedArray must be called in the init context (top-level code)")
	}
	name := valueString(call.Argument(0))
	if name == "" {
		throwf(rt, "SharedArray: a non-empty name is required")
	}
	fn, ok := sobek.AssertFunction(call.Argument(1))
	if !ok {
		throwf(rt, "SharedArray %q: the second argument must be a function returning an array", name)
	}
	elems, err := v.t.shared.get(name, func() ([]string, error) {
		res, err := fn(sobek.Undefined())
		if err != nil {
			return nil, err
		}
		obj, isObj := res.(*sobek.Object)
		if !isObj || obj.ClassName() != "Array" {
			return nil, fmt.Errorf("SharedArray %q: only arrays can be shared, the function returned %s", name, valueString(res))
		}
		n := int(obj.Get("length").ToInteger())
		out := make([]string, n)
		for i := range n {
			s, err := jsonStringify(rt, obj.Get(itoa(int64(i))))
			if err != nil {
				return nil, err
			}
			if s == "" {
				s = "null" // undefined elements, as JSON arrays hold them
			}
			out[i] = s
		}
		return out, nil
	})
	if err != nil {
		var ex *sobek.Exception
		if errors.As(err, &ex) {
			panic(ex.Value()) // rethrow what fn threw
		}
		throwf(rt, "%v", err)
	}
	return rt.NewDynamicArray(&sharedView{v: v, elems: elems, cache: make([]sobek.Value, len(elems))})
}

// sharedView is one VU's read-only view of a SharedArray.
type sharedView struct {
	v     *vu
	elems []string
	cache []sobek.Value
}

func (s *sharedView) Len() int { return len(s.elems) }

func (s *sharedView) Get(i int) sobek.Value {
	if i < 0 || i >= len(s.elems) {
		return sobek.Undefined()
	}
	if s.cache[i] == nil {
		val, err := jsonParse(s.v.rt, s.elems[i])
		if err != nil {
			return sobek.Undefined()
		}
		deepFreeze(s.v.rt, val)
		s.cache[i] = val
	}
	return s.cache[i]
}

func (s *sharedView) Set(int, sobek.Value) bool { return false }
func (s *sharedView) SetLen(int) bool           { return false }

// deepFreeze freezes val and everything it holds.
func deepFreeze(rt *sobek.Runtime, val sobek.Value) {
	obj, ok := val.(*sobek.Object)
	if !ok {
		return
	}
	for _, k := range obj.Keys() {
		deepFreeze(rt, obj.Get(k))
	}
	object := rt.Get("Object").ToObject(rt)
	if freeze, ok := sobek.AssertFunction(object.Get("freeze")); ok {
		_, _ = freeze(object, obj)
	}
}
