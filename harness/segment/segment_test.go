package segment

import (
	"fmt"
	"math/big"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func mustSeq(t *testing.T, s string) []*big.Rat {
	t.Helper()
	seq, err := ParseSequence(s)
	require.NoError(t, err)
	return seq
}

func stripes(t require.TestingT, seq []*big.Rat) []*Stripe {
	out := make([]*Stripe, len(seq)-1)
	for i := range out {
		st, err := New(Segment{From: seq[i], To: seq[i+1]}, seq)
		require.NoError(t, err)
		out[i] = st
	}
	return out
}

func TestStripe_ThirdsDealIndicesInTurn(t *testing.T) {
	t.Parallel()
	ss := stripes(t, mustSeq(t, "0,1/3,2/3,1"))
	for i := range int64(9) {
		for s, st := range ss {
			assert.Equal(t, int64(s) == i%3, st.Has(i), "index %d, segment %d", i, s)
		}
	}
	for n, want := range map[int64][3]int64{0: {0, 0, 0}, 1: {1, 0, 0}, 2: {1, 1, 0}, 10: {4, 3, 3}} {
		assert.Equal(t, want, [3]int64{ss[0].Scale(n), ss[1].Scale(n), ss[2].Scale(n)}, "n=%d", n)
	}
}

func TestStripe_UnevenSegmentsGetTheirShare(t *testing.T) {
	t.Parallel()
	ss := stripes(t, mustSeq(t, "0,1/4,1"))
	assert.Equal(t, int64(25), ss[0].Scale(100))
	assert.Equal(t, int64(75), ss[1].Scale(100))
	// the larger segment comes first in each cycle
	assert.True(t, ss[1].Has(0))
}

func TestStripe_WithoutSequenceIsTheSegmentAndItsComplement(t *testing.T) {
	t.Parallel()
	seg, err := Parse("1/2:1")
	require.NoError(t, err)
	st, err := New(seg, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(5), st.Scale(10))
	whole, err := New(Segment{From: new(big.Rat), To: big.NewRat(1, 1)}, nil)
	require.NoError(t, err)
	assert.Nil(t, whole)
	assert.Equal(t, int64(7), whole.Scale(7))
	assert.True(t, whole.Has(3))
}

// TestStripe_PartsAddUpToTheWhole: over any sequence, every index
// belongs to exactly one segment, so the segments' counts sum to n.
func TestStripe_PartsAddUpToTheWhole(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		parts := rapid.IntRange(1, 6).Draw(t, "parts")
		denom := rapid.IntRange(parts, 24).Draw(t, "denom")
		cuts := map[int]bool{}
		for len(cuts) < parts-1 {
			cuts[rapid.IntRange(1, denom-1).Draw(t, "cut")] = true
		}
		s := "0"
		for c := 1; c < denom; c++ {
			if cuts[c] {
				s += fmt.Sprintf(",%d/%d", c, denom)
			}
		}
		seq, err := ParseSequence(s + ",1")
		require.NoError(t, err)
		ss := stripes(t, seq)
		n := rapid.Int64Range(0, 5000).Draw(t, "n")
		var sum int64
		for _, st := range ss {
			sum += st.Scale(n)
		}
		require.Equal(t, n, sum)
		for i := range min(n, 200) {
			owners := 0
			for _, st := range ss {
				if st.Has(i) {
					owners++
				}
			}
			require.Equal(t, 1, owners, "index %d of %s", i, s)
		}
	})
}

func TestParse_RejectsWhatIsNotASegment(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "1/2:1/3", "0:2", "x", "-1:1", "1/3:1/3"} {
		_, err := Parse(bad)
		assert.Error(t, err, bad)
	}
	for _, bad := range []string{"0,1/2", "1/2,1", "0,2/3,1/3,1", "0"} {
		_, err := ParseSequence(bad)
		assert.Error(t, err, bad)
	}
	for in, want := range map[string]string{"1/3": "0:1/3", "25%:50%": "1/4:1/2", "0.5:1": "1/2:1"} {
		seg, err := Parse(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, seg.String())
		}
	}
	_, err := New(Segment{From: big.NewRat(1, 4), To: big.NewRat(1, 2)}, mustSeq(t, "0,1/3,1"))
	assert.ErrorContains(t, err, "not one of the sequence's segments")
}
