package recent

import "testing"

// TestEight_KeepsTheLastEightPut: a key is found while it is among the
// last eight put, with the value put last for it; the zero key of an
// empty slot is not found.
func TestEight_KeepsTheLastEightPut(t *testing.T) {
	var r Eight[int, string]
	if _, ok := r.Get(0); ok {
		t.Fatal("an empty Eight finds the zero key")
	}
	names := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	for k, v := range names {
		r.Put(k, v)
		for j := range k + 1 {
			got, ok := r.Get(j)
			if want := j > k-8; ok != want || ok && got != names[j] {
				t.Fatalf("after putting %d: Get(%d) = %q, %v; want found %v", k, j, got, ok, want)
			}
		}
	}
}
