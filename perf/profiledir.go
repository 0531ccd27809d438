package perf

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// The profiler's results directory: Dynamo's profiler (the planner's
// pre-deployment sweep) writes one raw_data.npz per engine role.
const (
	profilePrefillNPZ = "selected_prefill_interpolation/raw_data.npz"
	profileDecodeNPZ  = "selected_decode_interpolation/raw_data.npz"
)

// loadProfileDir reads a Table from a profiler results directory:
//
//   - selected_prefill_interpolation/raw_data.npz: prefill_isl and
//     prefill_ttft (ms), one point per measured prompt length at batch 1
//     (prefill_thpt_per_gpu is ignored);
//   - selected_decode_interpolation/raw_data.npz: max_kv_tokens (one
//     element), and x_kv_usage (the share of max_kv_tokens in use, 0..1),
//     y_context_length and z_itl (ms), one point per measured
//     (concurrency, context length) pair (z_thpt_per_gpu is ignored).
//
// The prefill points, sorted by prompt length, are the prefill curve. The
// decode points are scattered, so they are put on a grid: the context axis
// is the measured context lengths, the KV axis every measured KV token
// count (x_kv_usage × max_kv_tokens), and each cell is the ITL of its
// context length's own points, piecewise linear in KV tokens and extended
// along the end segments (held at the one value of a context length
// measured once), never below 0.
func loadProfileDir(dir string) (Table, error) {
	pre, err := readNPZFile(filepath.Join(dir, profilePrefillNPZ))
	if err != nil {
		return Table{}, err
	}
	dec, err := readNPZFile(filepath.Join(dir, profileDecodeNPZ))
	if err != nil {
		return Table{}, err
	}
	var t Table
	if t.PrefillISL, t.PrefillTTFTMs, err = profilePrefill(pre); err != nil {
		return Table{}, fmt.Errorf("%s: %w", profilePrefillNPZ, err)
	}
	if t.DecodeActiveKVTokens, t.DecodeContextLength, t.DecodeITLMs, err = profileDecode(dec); err != nil {
		return Table{}, fmt.Errorf("%s: %w", profileDecodeNPZ, err)
	}
	return t, nil
}

// isProfileDir says whether path is a directory holding both of the
// profiler's files.
func isProfileDir(path string) bool {
	for _, f := range []string{profilePrefillNPZ, profileDecodeNPZ} {
		if st, err := os.Stat(filepath.Join(path, f)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

func readNPZFile(path string) (npzArrays, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("profiler results: %w (a results directory holds %s and %s)", err, profilePrefillNPZ, profileDecodeNPZ)
	}
	if err != nil {
		return nil, err
	}
	arrays, err := readNPZ(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return arrays, nil
}

// profilePrefill sorts the measured prefill points by prompt length.
func profilePrefill(a npzArrays) (isl, ttft []float64, err error) {
	if isl, err = a.vector("prefill_isl"); err != nil {
		return nil, nil, err
	}
	if ttft, err = a.vector("prefill_ttft"); err != nil {
		return nil, nil, err
	}
	if len(isl) != len(ttft) {
		return nil, nil, fmt.Errorf("prefill_isl has %d points, prefill_ttft %d", len(isl), len(ttft))
	}
	order := make([]int, len(isl))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return isl[order[i]] < isl[order[j]] })
	x, y := make([]float64, len(isl)), make([]float64, len(isl))
	for k, i := range order {
		x[k], y[k] = isl[i], ttft[i]
		if k > 0 && x[k] == x[k-1] {
			return nil, nil, fmt.Errorf("prefill_isl measures %g twice; keep one point per prompt length", x[k])
		}
	}
	return x, y, nil
}

// profileDecode grids the scattered decode points (see loadProfileDir).
func profileDecode(a npzArrays) (kvAxis, ctxAxis []float64, itl [][]float64, err error) {
	maxKV, err := a.vector("max_kv_tokens")
	if err != nil {
		return nil, nil, nil, err
	}
	if len(maxKV) != 1 || !(maxKV[0] > 0) || math.IsInf(maxKV[0], 0) {
		return nil, nil, nil, fmt.Errorf("max_kv_tokens: want one positive number, got %v", maxKV)
	}
	usage, err := a.vector("x_kv_usage")
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, err := a.vector("y_context_length")
	if err != nil {
		return nil, nil, nil, err
	}
	z, err := a.vector("z_itl")
	if err != nil {
		return nil, nil, nil, err
	}
	if len(usage) != len(ctx) || len(ctx) != len(z) {
		return nil, nil, nil, fmt.Errorf("x_kv_usage, y_context_length and z_itl have %d, %d and %d points; want one of each per measurement",
			len(usage), len(ctx), len(z))
	}
	if len(z) == 0 {
		return nil, nil, nil, errors.New("no decode points")
	}
	type point struct{ kv, itl float64 }
	rows := map[float64][]point{}
	for i := range z {
		for _, v := range []float64{usage[i], ctx[i], z[i]} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, nil, nil, fmt.Errorf("point %d: not a finite number (%g, %g, %g)", i, usage[i], ctx[i], z[i])
			}
		}
		kv := usage[i] * maxKV[0]
		rows[ctx[i]] = append(rows[ctx[i]], point{kv, z[i]})
		kvAxis = append(kvAxis, kv)
	}
	slices.Sort(kvAxis)
	kvAxis = slices.Compact(kvAxis)
	for c := range rows {
		ctxAxis = append(ctxAxis, c)
	}
	slices.Sort(ctxAxis)
	itl = make([][]float64, len(kvAxis))
	for i := range itl {
		itl[i] = make([]float64, len(ctxAxis))
	}
	for j, c := range ctxAxis {
		pts := rows[c]
		sort.SliceStable(pts, func(a, b int) bool { return pts[a].kv < pts[b].kv })
		xs, ys := make([]float64, 0, len(pts)), make([]float64, 0, len(pts))
		for _, p := range pts {
			if n := len(xs); n > 0 && xs[n-1] == p.kv {
				return nil, nil, nil, fmt.Errorf("context length %g is measured twice at %g KV tokens; keep one point", c, p.kv)
			}
			xs, ys = append(xs, p.kv), append(ys, p.itl)
		}
		for i, kv := range kvAxis {
			k, f := locate(xs, kv)
			y := ys[k]
			if f != 0 {
				y += f * (ys[k+1] - ys[k])
			}
			itl[i][j] = math.Max(0, y)
		}
	}
	return kvAxis, ctxAxis, itl, nil
}
