package replay

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseGrid(t *testing.T) {
	t.Parallel()
	grid, err := ParseGrid("prefill.workers=1..3, router=kv|round-robin,args.enable_prefix_caching=false")
	require.NoError(t, err)
	require.Len(t, grid, 3)
	assert.Equal(t, Axis{Key: "prefill.workers", Values: []any{json.Number("1"), json.Number("2"), json.Number("3")}}, grid[0])
	assert.Equal(t, []any{"kv", "round-robin"}, grid[1].Values)
	assert.Equal(t, []any{false}, grid[2].Values)
	assert.Len(t, Combinations(grid), 6)
	for _, bad := range []string{"", "router", "a=3..1", "a=1..x", "a=1,a=2", "a=1..100000"} {
		_, err := ParseGrid(bad)
		assert.Error(t, err, bad)
	}
}

func TestWithValues_LeavesTheBaseAlone(t *testing.T) {
	t.Parallel()
	base := map[string]any{"prefill": map[string]any{"workers": json.Number("1")}}
	grid := []Axis{{Key: "prefill.workers", Values: []any{json.Number("4")}}, {Key: "decode.args.max_num_seqs", Values: []any{json.Number("8")}}}
	m, err := WithValues(base, grid, []any{json.Number("4"), json.Number("8")})
	require.NoError(t, err)
	assert.Equal(t, json.Number("4"), m["prefill"].(map[string]any)["workers"])
	assert.Equal(t, json.Number("8"), m["decode"].(map[string]any)["args"].(map[string]any)["max_num_seqs"])
	assert.Equal(t, map[string]any{"prefill": map[string]any{"workers": json.Number("1")}}, base)
	_, err = WithValues(map[string]any{"router": "kv"}, []Axis{{Key: "router.mode"}}, []any{"x"})
	assert.ErrorContains(t, err, "router is not an object")
}

func TestSweep_SameRowsOnOneOrManyCores(t *testing.T) {
	t.Parallel()
	base := map[string]any{"disagg": true, "seed": json.Number("1"), "args": map[string]any{"num_gpu_blocks": json.Number("4096")}}
	grid, err := ParseGrid("prefill.workers=1..2,router=kv|round-robin,decode.args.max_num_seqs=0|8")
	require.NoError(t, err)
	open := func() (*Reader, func() error, error) {
		f, err := os.Open("testdata/sessions.jsonl")
		if err != nil {
			return nil, nil, err
		}
		tr, err := NewReader(f)
		return tr, f.Close, err
	}
	var csvs [2]bytes.Buffer
	for i, parallel := range []int{1, 3} {
		rows, err := Sweep(base, grid, open, Options{SLO: SLO{TTFTMs: 60}}, parallel)
		require.NoError(t, err)
		require.Len(t, rows, 8)
		for _, r := range rows {
			if r.Values[2] == json.Number("0") {
				assert.Contains(t, r.Error, "max_num_seqs", "a refused config is a row with its error")
				continue
			}
			assert.Empty(t, r.Error)
			assert.Equal(t, uint64(6), r.Summary.Completed)
			assert.Equal(t, int(mustInt(r.Values[0]))+1, r.GPUs)
		}
		require.NoError(t, WriteCSV(&csvs[i], grid, rows))
	}
	assert.Equal(t, csvs[0].String(), csvs[1].String())
}

func mustInt(v any) int64 {
	n, err := v.(json.Number).Int64()
	if err != nil {
		panic(err)
	}
	return n
}

func TestMarkPareto_NoRowOnTheFrontIsDominated(t *testing.T) {
	t.Parallel()
	row := func(good, p90 float64) Row {
		return Row{GoodputPerGPU: good, Summary: Summary{Completed: 1, TTFT: Distribution{P90: p90}}}
	}
	rows := []Row{row(1, 100), row(2, 100), row(2, 50), row(3, 200), row(0.5, 10), {Error: "refused"}}
	markPareto(rows)
	var front []bool
	for _, r := range rows {
		front = append(front, r.Pareto)
	}
	assert.Equal(t, []bool{false, false, true, true, true, false}, front)
}
