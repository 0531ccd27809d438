package perf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The profiler's results directory: Dynamo's profiler (the planner's
// pre-deployment sweep) writes one raw_data.npz per engine role. Its older
// layout, which Dynamo's planner and mocker still read (a ConfigMap
// mounts it), holds the same arrays as one JSON object per role, side by
// side; a directory may hold either file for each role, the NPZ read
// first.
const (
	profilePrefillNPZ  = "selected_prefill_interpolation/raw_data.npz"
	profileDecodeNPZ   = "selected_decode_interpolation/raw_data.npz"
	profilePrefillJSON = "prefill_raw_data.json"
	profileDecodeJSON  = "decode_raw_data.json"
)

// profileArrays are one profile file's arrays, by name.
type profileArrays interface {
	vector(name string) ([]float64, error)
}

// jsonArrays are the arrays of an older profiler JSON file: each key an
// array of numbers, or a number (max_kv_tokens is a plain one there).
type jsonArrays map[string]json.RawMessage

func (a jsonArrays) vector(name string) ([]float64, error) {
	raw, ok := a[name]
	if !ok {
		return nil, fmt.Errorf("JSON has no array %q (it has %s)", name, strings.Join(slices.Sorted(maps.Keys(a)), ", "))
	}
	var v []float64
	if err := json.Unmarshal(raw, &v); err == nil {
		return v, nil
	}
	var x float64
	if err := json.Unmarshal(raw, &x); err == nil {
		return []float64{x}, nil
	}
	return nil, fmt.Errorf("JSON %s: want a number or an array of numbers, got %.40s", name, raw)
}

// readProfileRole reads one role's file in dir: its NPZ when there is
// one, else its older JSON. name is the file read, for errors.
func readProfileRole(dir, npzName, jsonName string) (a profileArrays, name string, err error) {
	if isFile(filepath.Join(dir, npzName)) {
		a, err := readNPZFile(filepath.Join(dir, npzName))
		return a, npzName, err
	}
	data, err := os.ReadFile(filepath.Join(dir, jsonName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("profiler results: neither %s nor %s", npzName, jsonName)
	}
	if err != nil {
		return nil, "", err
	}
	var m jsonArrays
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, "", fmt.Errorf("%s: want a JSON object of arrays: %w", jsonName, err)
	}
	return m, jsonName, nil
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// loadProfileDir reads a Table from a profiler results directory (each
// role's NPZ, or the older JSON of the same arrays):
//
//   - selected_prefill_interpolation/raw_data.npz (or
//     prefill_raw_data.json): prefill_isl and
//     prefill_ttft (ms), one point per measured prompt length at batch 1
//     (prefill_thpt_per_gpu is ignored);
//   - selected_decode_interpolation/raw_data.npz (or
//     decode_raw_data.json): max_kv_tokens (one element; in JSON a
//     number), and x_kv_usage (the share of max_kv_tokens in use, 0..1),
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
	pre, preName, err := readProfileRole(dir, profilePrefillNPZ, profilePrefillJSON)
	if err != nil {
		return Table{}, err
	}
	dec, decName, err := readProfileRole(dir, profileDecodeNPZ, profileDecodeJSON)
	if err != nil {
		return Table{}, err
	}
	var t Table
	if t.PrefillISL, t.PrefillTTFTMs, err = profilePrefill(pre); err != nil {
		return Table{}, fmt.Errorf("%s: %w", preName, err)
	}
	if t.DecodeActiveKVTokens, t.DecodeContextLength, t.DecodeITLMs, err = profileDecode(dec); err != nil {
		return Table{}, fmt.Errorf("%s: %w", decName, err)
	}
	return t, nil
}

// isProfileDir says whether path is a directory holding a profiler file
// for both roles.
func isProfileDir(path string) bool {
	return (isFile(filepath.Join(path, profilePrefillNPZ)) || isFile(filepath.Join(path, profilePrefillJSON))) &&
		(isFile(filepath.Join(path, profileDecodeNPZ)) || isFile(filepath.Join(path, profileDecodeJSON)))
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
func profilePrefill(a profileArrays) (isl, ttft []float64, err error) {
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
func profileDecode(a profileArrays) (kvAxis, ctxAxis []float64, itl [][]float64, err error) {
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
