package replay

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readAll reads every record of trace, or the error that stopped it,
// decoding its JSON rows through quickRow unless general says not to.
func readAll(t *testing.T, trace string, general bool) (recs []Record, err error) {
	t.Helper()
	tr, err := NewReader(strings.NewReader(trace))
	if err != nil {
		return nil, err
	}
	tr.noQuick = general
	for {
		r, err := tr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return recs, err
		}
		c := *r
		c.HashIDs = append([]uint64(nil), r.HashIDs...)
		recs = append(recs, c)
	}
}

// TestQuickRow_DecodesAsEncodingJSON reads rows, well formed and not,
// through quickRow and through encoding/json alone: the records and the
// errors are the same.
func TestQuickRow_DecodesAsEncodingJSON(t *testing.T) {
	t.Parallel()
	rows := []string{
		`{"timestamp": 11, "input_length": 3501, "output_length": 98, "hash_ids": [0, 1, 11000]}`,
		`{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[]}`,
		` { "hash_ids" : [ 7 ] , "output_length" : 2 , "input_length" : 9 , "timestamp" : 1.5e3 } `,
		`{"timestamp": 12.25, "input_length": 100, "output_length": 5}`,
		`{"timestamp": -0, "input_length": 100, "output_length": 5}`,
		`{"timestamp": 1, "input_length": 1.0, "output_length": 5}`,
		`{"timestamp": 1, "input_length": 1e2, "output_length": 5}`,
		`{"timestamp": 1, "input_length": -4, "output_length": 5}`,
		`{"timestamp": 1, "input_length": 4, "output_length": 5, "hash_ids": [-1]}`,
		`{"timestamp": 1, "input_length": 4, "output_length": 5, "hash_ids": [01]}`,
		`{"timestamp": 1, "input_length": 4, "output_length": 5, "hash_ids": [1,]}`,
		`{"timestamp": 1, "input_length": 4, "output_length": 5, "hash_ids": [9223372036854775808]}`,
		`{"timestamp": 1, "input_length": 99999999999999999999, "output_length": 5}`,
		`{"timestamp": 1e400, "input_length": 4, "output_length": 5}`,
		`{"timestamp": 1, "input_length": 4, "output_length": 5, "hash_ids": [1, 2], "hash_ids": [3]}`,
		`{"timestamp": 1, "Input_Length": 4, "output_length": 5}`,
		`{"timestamp": 1, "input_length": 4, "output_length": 5, "extra": {"a": [1]}}`,
		`{"timestamp": null, "input_length": 4, "output_length": 5}`,
		`{"timestamp": "1", "input_length": 4, "output_length": 5}`,
		`{"timestamp": 1, "input_length": 4, "output_length": 5} x`,
		`{"timestamp": 1, "input_length": 4, "output_length": 5`,
		`{"timestamp": 1 "input_length": 4, "output_length": 5}`,
		`{"timestamp": 1, "input_length": 4, "output_length": 5, "session_id": "s1", "delay": 5}`,
		`{"timestamp": .5, "input_length": 4, "output_length": 5}`,
		`{"timestamp": 5., "input_length": 4, "output_length": 5}`,
		`{"timestamp": +5, "input_length": 4, "output_length": 5}`,
		`{"input_length": 4, "output_length": 5}`,
		`{"timestamp": 1, "output_length": 5}`,
		`{}`,
		`[]`,
		`{"timestamp": 1, "input_length": 4, "output_length": 5, "hash_ids": 3}`,
	}
	rng := rand.New(rand.NewPCG(5, 8))
	for range 300 {
		// Rows cut or with a byte changed at random.
		r := []byte(rows[rng.IntN(4)])
		switch rng.IntN(3) {
		case 0:
			r = r[:rng.IntN(len(r))]
		case 1:
			r[rng.IntN(len(r))] = "{}[],:\" 0123456789-.eE+ax"[rng.IntN(25)]
		default:
			r = append(r, fmt.Sprintf(`, "k%d": %d}`, rng.IntN(3), rng.IntN(9))...)
		}
		rows = append(rows, string(r))
	}
	for i, row := range rows {
		wantRecs, wantErr := readAll(t, row+"\n", true)
		gotRecs, gotErr := readAll(t, row+"\n", false)
		require.Equal(t, fmt.Sprint(wantErr), fmt.Sprint(gotErr), "row %d %q", i, row)
		require.Equal(t, wantRecs, gotRecs, "row %d %q", i, row)
	}
}

// TestQuickRow_TakesMooncakeRows checks the quick decoder is the one that
// reads a Mooncake trace's rows.
func TestQuickRow_TakesMooncakeRows(t *testing.T) {
	t.Parallel()
	tr := &Reader{}
	for _, row := range strings.Split(string(longTrace(50)), "\n") {
		if row == "" {
			continue
		}
		tr.row = jsonRow{}
		require.True(t, tr.quickRow([]byte(row)), row)
	}
	require.False(t, tr.quickRow([]byte(`{"timestamp": 1, "session_id": "a", "input_length": 4, "output_length": 5}`)))
}
