// Package spell suggests the name a user probably meant when they typed one
// that does not exist: the "did you mean" of configuration and threshold
// errors.
package spell

// Closest returns the candidate nearest to name by edit distance, if that
// distance is at most maxDistance; otherwise "". Among equally near
// candidates the first wins, so a caller that wants a stable suggestion
// passes its candidates in a stable order.
func Closest(name string, candidates []string, maxDistance int) string {
	best, bestD := "", maxDistance+1
	for _, c := range candidates {
		if d := Distance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b, counted in bytes:
// the fewest single-byte insertions, deletions and substitutions that turn
// one into the other. Names are ASCII, so bytes are characters.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
