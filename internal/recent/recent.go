// Package recent keeps the last few values a cache handed out, to look at
// before the cache's map: a caller that goes back and forth between a
// handful of keys (one request's samples and their tag sets) compares a
// few keys instead of hashing one.
package recent

// Eight holds the last eight keys put and their values. The zero value is
// empty. It is not safe for concurrent use. Eight rather than fewer: a
// disaggregated request's samples take turns among five tag sets, and a
// caller cycling through one key more than it holds never finds any.
type Eight[K comparable, V any] struct {
	keys [8]K
	vals [8]V
	n    int // slots filled, so an unfilled slot's zero key matches nothing
	next int // the slot the next Put overwrites
}

// Get returns the value put for k, if k is among the last eight put.
func (r *Eight[K, V]) Get(k K) (V, bool) {
	for i := range r.n {
		if r.keys[i] == k {
			return r.vals[i], true
		}
	}
	var zero V
	return zero, false
}

// Put remembers v for k in place of the oldest of the eight. It is for a
// key Get did not find: a key put twice takes two slots.
func (r *Eight[K, V]) Put(k K, v V) {
	r.keys[r.next], r.vals[r.next] = k, v
	r.next = (r.next + 1) % len(r.keys)
	r.n = min(r.n+1, len(r.keys))
}
