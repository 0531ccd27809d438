// Package spare keeps the records of ended requests for later ones, up to
// a bound.
//
// A worker, a router and a cluster each keep a record per request in
// flight, and reuse an ended request's record for the next arrival, so a
// steady run allocates none. A list that kept every ended record would
// also keep, for good, one for each request of the largest backlog the
// run ever had, and grow to hold them all as that backlog drained (a
// burst, or any overloaded run's end). A List keeps at most Keep: past
// that, ended records are left to the collector.
package spare

// Keep is how many records a List keeps.
const Keep = 1024

// List is a stack of records kept for reuse. The zero value is empty and
// ready to use. It is not safe for concurrent use.
type List[T any] struct {
	items []*T
}

// Take returns the record put last, or nil when the list is empty.
func (l *List[T]) Take() *T {
	n := len(l.items)
	if n == 0 {
		return nil
	}
	x := l.items[n-1]
	l.items[n-1] = nil
	l.items = l.items[:n-1]
	return x
}

// Put keeps x for a later Take, unless the list holds Keep records
// already: then x is dropped.
func (l *List[T]) Put(x *T) {
	if len(l.items) < Keep {
		l.items = append(l.items, x)
	}
}

// Len is the number of records kept.
func (l *List[T]) Len() int { return len(l.items) }
