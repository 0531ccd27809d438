// Package perf holds the timing models that turn a batch's shape into a
// modeled duration in milliseconds. Models return modeled time: the engine
// applies decode_speedup_ratio, and only the live driver divides by
// speedup_ratio to get wall time.
//
// Two models ship. Polynomial is Dynamo's fitted default and needs no data.
// Interpolated reads profile measurements of a real engine; FromProfile picks
// between them from an engine's planner_profile_data path.
//
// # Profile tables
//
// A profile table is a JSON object with the five arrays of Dynamo's
// mocker-format NPZ profiles, under the same names:
//
//	{
//	  "prefill_isl":             [128, 512, 1024, 2048],
//	  "prefill_ttft_ms":         [20, 40, 70, 130],
//	  "decode_active_kv_tokens": [1000, 5000, 9000],
//	  "decode_context_length":   [100, 1100],
//	  "decode_itl":              [[5, 6], [9, 11], [13, 16]]
//	}
//
// prefill_ttft_ms[i] is the time of a prefill pass that computes
// prefill_isl[i] new tokens in total (summed over the batch). decode_itl[i][j]
// is the time of a decode step with decode_active_kv_tokens[i] KV tokens in
// use and a mean context length of decode_context_length[j]. Axes are
// strictly increasing and non-negative; latencies are non-negative ms. An
// axis with one point makes the model constant along it. Between points the
// model interpolates linearly (bilinearly for decode); beyond the ends it
// extends the end segments.
//
// LoadInterpolated also reads the layouts a Dynamo planner_profile_data
// path can name, so one works unchanged:
//
//   - a mocker-format .npz (the same five arrays, little-endian numbers),
//     such as testdata/profile.npz;
//   - a directory of the profiler's results, as Dynamo's profiler writes it
//     for the planner: selected_prefill_interpolation/raw_data.npz
//     (prefill_isl, prefill_ttft in ms) and
//     selected_decode_interpolation/raw_data.npz (max_kv_tokens, and one
//     point per measurement in x_kv_usage, y_context_length and z_itl in
//     ms), such as testdata/profile_results, or in its older layout the
//     same arrays as JSON objects, prefill_raw_data.json and
//     decode_raw_data.json (max_kv_tokens a number), side by side, such as
//     testdata/profile_results_json. Its prefill points are the
//     prefill curve; its scattered decode points are put on the grid of the
//     measured KV token counts (x_kv_usage × max_kv_tokens) and context
//     lengths, each context length linear in KV tokens between its own
//     points and along its end segments beyond them. Dynamo's mocker
//     instead fits its planner's regression models to the points and
//     samples them on a 100 × 100 grid, so between points the two differ;
//     at a measured point mocker gives the measurement.
package perf

import "math"

// Model predicts how long one forward pass takes, in modeled milliseconds.
type Model interface {
	// PrefillMs is the prefill part of a pass that computes batch prompts
	// with mean length meanISL tokens of which meanPrefix were cached.
	// It is 0 when no uncached token is computed.
	PrefillMs(batch int, meanISL, meanPrefix float64) float64
	// DecodeMs is the decode part of a pass that emits one token for each of
	// batch sequences, with activeKVTokens of the worker's totalKVTokens in
	// use and a mean context length of contextLen tokens. Never below
	// MinDecodeMs when batch > 0.
	DecodeMs(batch int, activeKVTokens, totalKVTokens, contextLen float64) float64
}

// MinDecodeMs is the floor on a decode step, so consecutive decode passes
// never share a timestamp.
const MinDecodeMs = 1.0

// Polynomial is Dynamo's default fitted model, usable with no profile data.
// With T = batch × (meanISL − meanPrefix) uncached tokens and
// u = min(1, activeKVTokens / totalKVTokens) the KV utilisation (1 when the
// pool size is unknown):
//
//	prefill(T) = 4.209989e-7·T² + 1.518344e-2·T + 16.50142   (0 when T ≤ 0)
//	decode(u)  = max(MinDecodeMs, −25.74·u² + 54.01·u + 5.74)
//
// It ignores context length: decode cost follows pool pressure only.
//
// The fit is a parabola that peaks at u ≈ 1.05 and falls below the floor
// past u ≈ 2.2, so mocker clamps u at 1: a step never gets cheaper as load
// grows. Dynamo main does not clamp; Unclamped reproduces that, and with it
// an overfull batch (SGLang's logical KV can exceed the pool) steps at the
// 1 ms floor.
type Polynomial struct {
	// Unclamped leaves u unclamped, as Dynamo main computes it.
	Unclamped bool
}

// PrefillMs implements Model.
func (Polynomial) PrefillMs(batch int, meanISL, meanPrefix float64) float64 {
	t := float64(batch) * (meanISL - meanPrefix)
	if batch <= 0 || t <= 0 {
		return 0
	}
	return 4.209989e-7*t*t + 1.518344e-2*t + 16.50142
}

// DecodeMs implements Model.
func (p Polynomial) DecodeMs(batch int, activeKVTokens, totalKVTokens, _ float64) float64 {
	if batch <= 0 {
		return 0
	}
	u := 1.0
	if totalKVTokens > 0 {
		u = activeKVTokens / totalKVTokens
		if !p.Unclamped {
			u = math.Min(1, u)
		}
	}
	return math.Max(MinDecodeMs, -25.74*u*u+54.01*u+5.74)
}

// Fixed is Dynamo's constant-latency model (timing_model type "fixed"): a
// pass that computes prompt tokens costs PrefillMs, a decode step
// DecodeMs, whatever the batch. The engine still floors a decode step at
// MinDecodeMs.
type Fixed struct {
	// Prefill is the time of any pass that computes prompt tokens, in ms
	// (Dynamo's prefill_ms).
	Prefill float64
	// Decode is the time of any decode step, in ms (Dynamo's decode_ms).
	Decode float64
}

// PrefillMs implements Model.
func (f Fixed) PrefillMs(batch int, meanISL, meanPrefix float64) float64 {
	if batch <= 0 || !(meanISL-meanPrefix > 0) {
		return 0
	}
	return f.Prefill
}

// DecodeMs implements Model.
func (f Fixed) DecodeMs(batch int, _, _, _ float64) float64 {
	if batch <= 0 {
		return 0
	}
	return f.Decode
}
