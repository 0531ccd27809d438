// Package perf holds the timing models that turn a batch's shape into a
// modeled duration in milliseconds. Models return modeled time: the engine
// applies decode_speedup_ratio, and only the live driver divides by
// speedup_ratio to get wall time.
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

// Polynomial is Dynamo's default fitted model: prefill is quadratic in the
// batch's uncached tokens, decode quadratic in KV utilisation.
type Polynomial struct{}

// PrefillMs implements Model.
func (Polynomial) PrefillMs(batch int, meanISL, meanPrefix float64) float64 {
	t := float64(batch) * (meanISL - meanPrefix)
	if batch <= 0 || t <= 0 {
		return 0
	}
	return 4.209989e-7*t*t + 1.518344e-2*t + 16.50142
}

// DecodeMs implements Model.
func (Polynomial) DecodeMs(batch int, activeKVTokens, totalKVTokens, _ float64) float64 {
	if batch <= 0 {
		return 0
	}
	u := 1.0
	if totalKVTokens > 0 {
		u = math.Min(1, activeKVTokens/totalKVTokens)
	}
	return math.Max(MinDecodeMs, -25.74*u*u+54.01*u+5.74)
}
