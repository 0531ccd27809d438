package replay

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

func itoa(n int) string        { return strconv.Itoa(n) }
func ftoa(f float64) string    { return strconv.FormatFloat(f, 'g', -1, 64) }
func row(fields string) string { return "{" + fields + "}\n" }

// endless is a trace whose second line never ends: a 10 GB line, or worse.
type endless struct{ head string }

func (e *endless) Read(p []byte) (int, error) {
	n := copy(p, e.head)
	e.head = e.head[n:]
	for i := n; i < len(p); i++ {
		p[i] = 'x'
	}
	return len(p), nil
}

func TestReplay_BadInputNamesLineAndField(t *testing.T) {
	t.Parallel()
	good := row(`"timestamp": 0, "input_length": 10, "output_length": 2`)
	for _, tc := range []struct {
		name, trace string
		want        string // in the error
		line        int
		field       string
	}{
		{"not JSON", good + "{oops\n", "not a JSON object", 2, ""},
		{"negative input", good + row(`"timestamp": 1, "input_length": -5, "output_length": 2`), "want a number of tokens", 2, "input_length"},
		{"zero output", good + row(`"timestamp": 1, "input_length": 5, "output_length": 0`), "got 0", 2, "output_length"},
		{"missing input", good + row(`"timestamp": 1, "output_length": 2`), "missing", 2, "input_length"},
		{"string length", good + row(`"timestamp": 1, "input_length": "ten", "output_length": 2`), "want a number", 2, "input_length"},
		{"negative hash id", good + row(`"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": [1, -2]`), "≥ 0", 2, "hash_ids[1]"},
		{"timestamp backwards", good + row(`"timestamp": 9, "input_length": 5, "output_length": 2`) + row(`"timestamp": 3, "input_length": 5, "output_length": 2`), "before line 2's 9", 3, "timestamp"},
		{"negative timestamp", row(`"timestamp": -1, "input_length": 5, "output_length": 2`), "≥ 0", 1, "timestamp"},
		{"no timestamp", row(`"input_length": 5, "output_length": 2`), "missing", 1, "timestamp"},
		{"prompt too long", row(`"timestamp": 0, "input_length": 99999999, "output_length": 2`), "want a number of tokens", 1, "input_length"},
		{"csv without output column", "timestamp,input_length\n0,5\n", "no such column", 1, "output_length"},
		{"csv short row", "timestamp,input_length,output_length\n0,5,2\n1,5\n", "want 3 comma-separated fields", 3, ""},
		{"csv bad number", "timestamp,input_length,output_length\n0,5,2\n1,five,2\n", "want an integer", 3, "input_length"},
		{"csv negative length", "timestamp,input_length,output_length\n0,-5,2\n", "want a number of tokens", 2, "input_length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := NewReader(strings.NewReader(tc.trace))
			require.NoError(t, err)
			_, err = Run(aggregated(16), tr, Options{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tc.line, pe.Line)
			assert.Equal(t, tc.field, pe.Field)
		})
	}
}

func TestReader_EmptyTraceIsAnError(t *testing.T) {
	t.Parallel()
	for _, trace := range []string{"", "\n\n  \n", "timestamp,input_length,output_length\n"} {
		tr, err := NewReader(strings.NewReader(trace))
		if err == nil {
			_, err = Run(aggregated(16), tr, Options{})
		}
		assert.ErrorIs(t, err, ErrEmpty, "%q", trace)
	}
}

func TestReader_EndlessLineStopsAtTheBound(t *testing.T) {
	t.Parallel()
	src := &endless{head: row(`"timestamp": 0, "input_length": 10, "output_length": 2`) + `{"timestamp": 1, "hash_ids": [`}
	tr, err := NewReader(io.LimitReader(src, 1<<40))
	require.NoError(t, err)
	_, err = tr.Next()
	require.NoError(t, err)
	_, err = tr.Next()
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 2, pe.Line)
	assert.Contains(t, err.Error(), "longer than")
	assert.LessOrEqual(t, cap(tr.buf), 4*MaxLineBytes, "the reader kept no more than about the bound")
}

func TestReader_BlankLinesAndUnknownKeysAreSkipped(t *testing.T) {
	t.Parallel()
	trace := "\n" + row(`"timestamp": 0, "input_length": 10, "output_length": 2, "priority": 3`) + "\n\n" + row(`"created_time": 4, "input_length": 7, "output_length": 1, "session_id": 12`)
	tr, err := NewReader(strings.NewReader(trace))
	require.NoError(t, err)
	a, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, 2, a.Line)
	assert.Equal(t, 10, a.InputLength)
	b, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, 5, b.Line)
	assert.Equal(t, "12", b.Session, "a numeric session id is its text")
	assert.Equal(t, 4.0, b.TimestampMs)
	_, err = tr.Next()
	assert.True(t, errors.Is(err, io.EOF))
}

func TestAppendTokens_EqualIDsGiveEqualBlocks(t *testing.T) {
	t.Parallel()
	a := AppendTokens(nil, []uint64{5, 6, 7}, 1300, 512, 1)
	b := AppendTokens(nil, []uint64{5, 6, 8}, 1300, 512, 2)
	require.Len(t, a, 1300)
	assert.Equal(t, a[:1024], b[:1024], "the shared ids' blocks")
	assert.NotEqual(t, a[1024:], b[1024:], "different ids")
	c := AppendTokens(nil, []uint64{5}, 600, 512, 3)
	d := AppendTokens(nil, []uint64{5}, 600, 512, 4)
	assert.Equal(t, c[:512], d[:512])
	assert.NotEqual(t, c[512:], d[512:], "tokens past the ids are the request's own")
}

// TestAppendTokens_AsAppendingOneByOne checks the tokens against a plain
// statement of the rule, a token appended at a time, over ragged lengths,
// reused buffers and more ids than tokens.
func TestAppendTokens_AsAppendingOneByOne(t *testing.T) {
	t.Parallel()
	want := func(ids []uint64, n, bs int, uniq uint64) []uint32 {
		out := []uint32{}
		for _, h := range ids {
			for k := 0; k < bs && len(out) < n; k++ {
				out = append(out, uint32(h)^uint32(h>>32))
			}
		}
		for j := uint64(0); len(out) < n; j++ {
			out = append(out, uint32(mix(mix(uniq)+j))|1<<31)
		}
		return out
	}
	buf := make([]uint32, 0, 64)
	for i := range 400 {
		n, bs := i*7%1500, 1+i%97
		ids := make([]uint64, i%9)
		for k := range ids {
			ids[k] = uint64(k*i) << (k * 7 % 40)
		}
		buf = AppendTokens(buf[:0], ids, n, bs, uint64(i))
		require.Equal(t, want(ids, n, bs, uint64(i)), append([]uint32{}, buf...), "case %d", i)
	}
}

// TestPlayer_HashesAreTheTokens checks the block hashes the player gives
// the cluster against hashing the prompt's tokens, for trace blocks that
// are whole engine blocks and for those that are not, ids repeating so
// that the memo answers, prompts ending inside a trace block or past the
// ids, and the buffers reused.
func TestPlayer_HashesAreTheTokens(t *testing.T) {
	t.Parallel()
	for _, sizes := range [][2]int{{512, 16}, {512, 64}, {64, 16}, {100, 16}, {16, 32}, {7, 1}} {
		tb, bs := sizes[0], sizes[1]
		p := &player{opts: Options{BlockSize: tb}, bs: bs}
		var h kv.Hashes
		var buf []uint32
		for i := range 200 {
			ids := make([]uint64, 1+i%7)
			for k := range ids {
				ids[k] = uint64((k + i/3) % 5)
			}
			n := (i*37)%(tb*(len(ids)+2)) + 1
			buf = AppendTokens(buf[:0], ids, n, tb, uint64(i))
			p.hash(&h, buf, ids)
			wantL, wantS := kv.BlockHashes(buf, bs, nil, nil)
			require.Equal(t, bs, h.BlockSize)
			require.Equal(t, len(wantS), len(h.Seqs), "trace block %d, block %d, case %d", tb, bs, i)
			if len(wantS) > 0 {
				require.Equal(t, wantL, h.Locals, "trace block %d, block %d, case %d", tb, bs, i)
				require.Equal(t, wantS, h.Seqs, "trace block %d, block %d, case %d", tb, bs, i)
			}
		}
	}
}
