package engine

import "testing"

// sglangBenchArgs are BenchmarkVirtualCluster's args for the SGLang model:
// 16-token pages and the same 8192-page pool.
func sglangBenchArgs() Args {
	a := benchArgs()
	a.EngineType = EngineSGLang
	sg := DefaultSGLangArgs()
	sg.PageSize = a.BlockSize
	a.SGLang = &sg
	return a
}

// BenchmarkVirtualClusterSGLang is BenchmarkVirtualCluster over four
// aggregated SGLang workers: b.N requests of 100 prompt and 50 output
// tokens, one every 2.5 modeled ms, round-robin.
func BenchmarkVirtualClusterSGLang(b *testing.B) { benchAggregated(b, sglangBenchArgs()) }
