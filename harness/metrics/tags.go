package metrics

import (
	"iter"
	"sort"
	"strings"
)

type tagPair struct{ key, value string }

// Tags is an immutable tag set kept sorted by key. The zero value is the
// empty set. A Tags value is a slice header, so passing it around is cheap;
// With returns a new set and never changes the receiver, so a set can be
// shared between goroutines and samples without copying.
type Tags struct {
	pairs []tagPair
}

// NewTags builds a tag set from a map.
func NewTags(m map[string]string) Tags {
	if len(m) == 0 {
		return Tags{}
	}
	pairs := make([]tagPair, 0, len(m))
	for k, v := range m {
		pairs = append(pairs, tagPair{k, v})
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].key < pairs[j].key })
	return Tags{pairs: pairs}
}

func (t Tags) search(key string) (int, bool) {
	i := sort.Search(len(t.pairs), func(i int) bool { return t.pairs[i].key >= key })
	return i, i < len(t.pairs) && t.pairs[i].key == key
}

// With returns a copy of t with key set to value (replacing any old value).
func (t Tags) With(key, value string) Tags {
	i, found := t.search(key)
	if found {
		if t.pairs[i].value == value {
			return t
		}
		pairs := make([]tagPair, len(t.pairs))
		copy(pairs, t.pairs)
		pairs[i].value = value
		return Tags{pairs: pairs}
	}
	pairs := make([]tagPair, len(t.pairs)+1)
	copy(pairs, t.pairs[:i])
	pairs[i] = tagPair{key, value}
	copy(pairs[i+1:], t.pairs[i:])
	return Tags{pairs: pairs}
}

// Merge returns t with every tag of other set over it (other wins), which is
// how per-call tags override VU and scenario tags.
func (t Tags) Merge(other Tags) Tags {
	if len(other.pairs) == 0 {
		return t
	}
	if len(t.pairs) == 0 {
		return other
	}
	out := make([]tagPair, 0, len(t.pairs)+len(other.pairs))
	i, j := 0, 0
	for i < len(t.pairs) && j < len(other.pairs) {
		switch a, b := t.pairs[i], other.pairs[j]; {
		case a.key < b.key:
			out = append(out, a)
			i++
		case a.key > b.key:
			out = append(out, b)
			j++
		default:
			out = append(out, b)
			i++
			j++
		}
	}
	out = append(out, t.pairs[i:]...)
	out = append(out, other.pairs[j:]...)
	return Tags{pairs: out}
}

// Get returns the value of key.
func (t Tags) Get(key string) (string, bool) {
	// Most sample tag sets are small; a linear scan beats the binary search's
	// closure call there.
	if len(t.pairs) <= 8 {
		for _, p := range t.pairs {
			if p.key == key {
				return p.value, true
			}
		}
		return "", false
	}
	i, ok := t.search(key)
	if !ok {
		return "", false
	}
	return t.pairs[i].value, true
}

// TagsID identifies a tag set value by identity (not content): equal
// IDs mean the same, unchanged set.
type TagsID struct {
	p *tagPair
	n int
}

// ID returns t's identity: tag sets are immutable, so a cache may key by
// it; two sets with the same content built apart have different IDs.
func (t Tags) ID() TagsID {
	if len(t.pairs) == 0 {
		return TagsID{}
	}
	return TagsID{&t.pairs[0], len(t.pairs)}
}

// Len returns the number of tags.
func (t Tags) Len() int { return len(t.pairs) }

// All iterates the tags in key order.
func (t Tags) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, p := range t.pairs {
			if !yield(p.key, p.value) {
				return
			}
		}
	}
}

// Map returns the tags as a new map.
func (t Tags) Map() map[string]string {
	m := make(map[string]string, len(t.pairs))
	for _, p := range t.pairs {
		m[p.key] = p.value
	}
	return m
}

// Contains reports whether every tag of sub is in t with the same value:
// the test a sample passes to feed a tag-filtered submetric.
func (t Tags) Contains(sub Tags) bool {
	if len(sub.pairs) > len(t.pairs) {
		return false
	}
	i := 0
	for _, want := range sub.pairs {
		for i < len(t.pairs) && t.pairs[i].key < want.key {
			i++
		}
		if i == len(t.pairs) || t.pairs[i].key != want.key || t.pairs[i].value != want.value {
			return false
		}
		i++
	}
	return true
}

// Equal reports whether t and o hold the same tags.
func (t Tags) Equal(o Tags) bool {
	if len(t.pairs) != len(o.pairs) {
		return false
	}
	for i := range t.pairs {
		if t.pairs[i] != o.pairs[i] {
			return false
		}
	}
	return true
}

// String renders the set as k6 writes a submetric suffix: "k1:v1,k2:v2".
func (t Tags) String() string {
	var b strings.Builder
	for i, p := range t.pairs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.key)
		b.WriteByte(':')
		b.WriteString(p.value)
	}
	return b.String()
}
