package metrics

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTags_WithDoesNotChangeReceiver(t *testing.T) {
	t.Parallel()
	base := NewTags(map[string]string{"b": "2", "a": "1"})
	next := base.With("c", "3").With("a", "9")
	assert.Equal(t, map[string]string{"a": "1", "b": "2"}, base.Map())
	assert.Equal(t, map[string]string{"a": "9", "b": "2", "c": "3"}, next.Map())
	v, ok := next.Get("a")
	assert.True(t, ok)
	assert.Equal(t, "9", v)
	_, ok = base.Get("c")
	assert.False(t, ok)
	assert.Equal(t, "a:9,b:2,c:3", next.String())
}

func TestTags_ZeroValueIsEmpty(t *testing.T) {
	t.Parallel()
	var z Tags
	assert.Equal(t, 0, z.Len())
	assert.Empty(t, z.Map())
	_, ok := z.Get("x")
	assert.False(t, ok)
	assert.Equal(t, map[string]string{"x": "1"}, z.With("x", "1").Map())
	assert.True(t, z.Contains(Tags{}))
}

func TestTags_ContainsIsSubset(t *testing.T) {
	t.Parallel()
	sample := NewTags(map[string]string{"status": "200", "method": "GET", "scenario": "s1"})
	tests := []struct {
		filter map[string]string
		want   bool
	}{
		{map[string]string{}, true},
		{map[string]string{"status": "200"}, true},
		{map[string]string{"status": "200", "scenario": "s1"}, true},
		{map[string]string{"method": "GET", "scenario": "s1", "status": "200"}, true},
		{map[string]string{"status": "500"}, false},
		{map[string]string{"zone": "a"}, false},
		{map[string]string{"status": "200", "zone": "a"}, false},
		{map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"}, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, sample.Contains(NewTags(tt.filter)), "%v", tt.filter)
	}
}

func TestTags_MergeOtherWins(t *testing.T) {
	t.Parallel()
	a := NewTags(map[string]string{"a": "1", "b": "2"})
	b := NewTags(map[string]string{"b": "x", "c": "3"})
	assert.Equal(t, map[string]string{"a": "1", "b": "x", "c": "3"}, a.Merge(b).Map())
	var keys []string
	for k := range a.Merge(b).All() {
		keys = append(keys, k)
	}
	assert.Equal(t, []string{"a", "b", "c"}, keys)
}

func TestTags_GetOnLargeSet(t *testing.T) {
	t.Parallel()
	m := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"} {
		m[k] = k + k
	}
	tg := NewTags(m)
	for k, v := range m {
		got, ok := tg.Get(k)
		assert.True(t, ok)
		assert.Equal(t, v, got)
	}
	_, ok := tg.Get("zz")
	assert.False(t, ok)
}
