package spare

import "testing"

func TestList_TakesWhatWasPutLastFirst(t *testing.T) {
	var l List[int]
	if l.Take() != nil {
		t.Fatal("an empty list gave a record")
	}
	a, b := new(int), new(int)
	l.Put(a)
	l.Put(b)
	if got := l.Take(); got != b {
		t.Fatalf("took %p, want the last put %p", got, b)
	}
	if got := l.Take(); got != a {
		t.Fatalf("took %p, want %p", got, a)
	}
	if l.Take() != nil || l.Len() != 0 {
		t.Fatalf("the list still has %d records", l.Len())
	}
}

func TestList_KeepsAtMostKeep(t *testing.T) {
	var l List[int]
	kept := make(map[*int]bool)
	for i := range Keep + 100 {
		x := new(int)
		*x = i
		if i < Keep {
			kept[x] = true
		}
		l.Put(x)
	}
	if l.Len() != Keep {
		t.Fatalf("%d records kept, want %d", l.Len(), Keep)
	}
	for range Keep {
		if x := l.Take(); !kept[x] {
			t.Fatalf("took a record put past the bound (%d)", *x)
		}
	}
	if l.Take() != nil {
		t.Fatal("more than Keep records came back")
	}
}
