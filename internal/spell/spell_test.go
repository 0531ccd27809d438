package spell

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"abc", "abc", 0},
		{"abc", "abd", 1},
		{"abc", "ab", 1},
		{"", "abc", 3},
		{"abc", "", 3},
		{"kitten", "sitting", 3},
		{"num_gpu_block", "num_gpu_blocks", 1},
	} {
		assert.Equal(t, tc.want, Distance(tc.a, tc.b), "%q vs %q", tc.a, tc.b)
		assert.Equal(t, tc.want, Distance(tc.b, tc.a), "symmetric: %q vs %q", tc.b, tc.a)
	}
}

func TestClosest(t *testing.T) {
	t.Parallel()
	names := []string{"block_size", "num_gpu_blocks", "max_num_seqs"}
	for _, tc := range []struct {
		name       string
		candidates []string
		max        int
		want       string
	}{
		{"num_gpu_block", names, 2, "num_gpu_blocks"},
		{"blok_size", names, 2, "block_size"},
		{"max_seqs", names, 2, ""}, // four deletions away
		{"max_seqs", names, 4, "max_num_seqs"},
		{"anything", nil, 5, ""},
		{"ab", []string{"ax", "ay"}, 1, "ax"}, // ties go to the first candidate
		{"ab", []string{"ay", "ax"}, 1, "ay"},
		{"exact", []string{"exact"}, 0, "exact"},
	} {
		assert.Equal(t, tc.want, Closest(tc.name, tc.candidates, tc.max), "%q within %d of %v", tc.name, tc.max, tc.candidates)
	}
}
