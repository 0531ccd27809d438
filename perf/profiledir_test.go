package perf

import (
	"archive/zip"
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateTestdata = flag.Bool("update", false, "rewrite the NPZ files in testdata from the arrays the tests build")

type namedArray struct {
	name string
	data []byte
}

// npzBytes lays out an NPZ archive with its arrays in the order given and
// no timestamps, so the same arrays always give the same bytes.
func npzBytes(t *testing.T, arrays ...namedArray) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, a := range arrays {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: a.name + ".npy", Method: zip.Deflate})
		require.NoError(t, err)
		_, err = w.Write(a.data)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// testdataNPZ are the NPZ files in testdata and the arrays they hold:
// profile.npz is testdata/profile.json in Dynamo's mocker format, and
// profile_results is a profiler's results directory as Dynamo's profiler
// lays it out, its points in measurement order (not sorted), with the
// arrays the mocker ignores beside them.
func testdataNPZ(t *testing.T) map[string][]byte {
	return map[string][]byte{
		"profile.npz": npzBytes(t,
			namedArray{"prefill_isl", npyArray(t, "<i8", false, []int{4}, []float64{128, 512, 1024, 2048})},
			namedArray{"prefill_ttft_ms", npyArray(t, "<f8", false, []int{4}, []float64{20, 40, 70, 130})},
			namedArray{"decode_active_kv_tokens", npyArray(t, "<f8", false, []int{3}, []float64{1000, 5000, 9000})},
			namedArray{"decode_context_length", npyArray(t, "<f8", false, []int{2}, []float64{100, 1100})},
			namedArray{"decode_itl", npyArray(t, "<f8", false, []int{3, 2}, []float64{5, 6, 9, 11, 13, 16})},
		),
		filepath.FromSlash("profile_results/" + profilePrefillNPZ): npzBytes(t,
			namedArray{"prefill_isl", npyArray(t, "<f8", false, []int{4}, []float64{3000, 500, 1000, 2000})},
			namedArray{"prefill_ttft", npyArray(t, "<f8", false, []int{4}, []float64{180, 30, 62, 118})},
			namedArray{"prefill_thpt_per_gpu", npyArray(t, "<f8", false, []int{4}, []float64{16667, 16667, 16129, 16949})},
		),
		filepath.FromSlash("profile_results/" + profileDecodeNPZ): npzBytes(t,
			namedArray{"max_kv_tokens", npyArray(t, "<i8", false, []int{1}, []float64{100000})},
			namedArray{"x_kv_usage", npyArray(t, "<f8", false, []int{5}, []float64{0.6, 0.1, 0.2, 0.3, 0.6})},
			namedArray{"y_context_length", npyArray(t, "<f8", false, []int{5}, []float64{600, 600, 1200, 600, 1200})},
			namedArray{"z_itl", npyArray(t, "<f8", false, []int{5}, []float64{14, 5, 7, 8, 16})},
			namedArray{"z_thpt_per_gpu", npyArray(t, "<f8", false, []int{5}, []float64{7000, 2000, 2800, 3700, 3700})},
		),
	}
}

// The NPZ files in testdata are the project's own, made by testdataNPZ:
// `go test ./perf -run TestTestdataNPZ -update` rewrites them.
func TestTestdataNPZ_AreTheProjectsOwn(t *testing.T) {
	for name, want := range testdataNPZ(t) {
		path := filepath.Join("testdata", name)
		if *updateTestdata {
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, want, 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, want, got, "%s differs from what testdataNPZ makes: run go test ./perf -run TestTestdataNPZ -update", path)
	}
}

func TestFromProfile_MockerFormatNPZ(t *testing.T) {
	t.Parallel()
	m, err := FromProfile(filepath.Join("testdata", "profile.npz"))
	require.NoError(t, err)
	j := loadExample(t)
	for _, p := range [][2]float64{{0, 0}, {2500, 300}, {9000, 1100}, {20000, 5000}} {
		assert.InDelta(t, j.DecodeMs(2, p[0], 0, p[1]), m.DecodeMs(2, p[0], 0, p[1]), 1e-9)
	}
	for _, isl := range []float64{64, 320, 4096} {
		assert.InDelta(t, j.PrefillMs(1, isl, 0), m.PrefillMs(1, isl, 0), 1e-9)
	}
}

// A profiler's results directory: the prefill points sorted by prompt
// length; the decode points on the grid of measured KV token counts
// (usage × max_kv_tokens: 10000, 20000, 30000, 60000) and context lengths
// (600, 1200), each context length linear in KV tokens between its own
// points and along its end segments beyond them.
func TestFromProfile_ProfilerResultsDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "profile_results")
	table, err := loadProfileDir(dir)
	require.NoError(t, err)
	assert.Equal(t, []float64{500, 1000, 2000, 3000}, table.PrefillISL)
	assert.Equal(t, []float64{30, 62, 118, 180}, table.PrefillTTFTMs)
	assert.Equal(t, []float64{10000, 20000, 30000, 60000}, table.DecodeActiveKVTokens)
	assert.Equal(t, []float64{600, 1200}, table.DecodeContextLength)
	want := [][]float64{{5, 4.75}, {6.5, 7}, {8, 9.25}, {14, 16}}
	require.Len(t, table.DecodeITLMs, len(want))
	for i := range want {
		for j := range want[i] {
			assert.InDelta(t, want[i][j], table.DecodeITLMs[i][j], 1e-9, "kv %g, context %g", table.DecodeActiveKVTokens[i], table.DecodeContextLength[j])
		}
	}

	m, err := FromProfile(dir)
	require.NoError(t, err)
	assert.InDelta(t, 90.0, m.PrefillMs(1, 1500, 0), 1e-9)
	assert.InDelta(t, 6.75, m.DecodeMs(1, 20000, 0, 900), 1e-9)
	assert.InDelta(t, 9.25, m.DecodeMs(4, 30000, 0, 1200), 1e-9)
}

func TestFromProfile_ProfilerResultsErrors(t *testing.T) {
	t.Parallel()
	files := testdataNPZ(t)
	pre := files[filepath.FromSlash("profile_results/"+profilePrefillNPZ)]
	dec := files[filepath.FromSlash("profile_results/"+profileDecodeNPZ)]
	write := func(t *testing.T, prefill, decode []byte) string {
		dir := t.TempDir()
		for rel, data := range map[string][]byte{profilePrefillNPZ: prefill, profileDecodeNPZ: decode} {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, data, 0o600))
		}
		return dir
	}
	cases := []struct {
		name            string
		prefill, decode []byte
		want            []string
	}{
		{"duplicate prompt length", npzBytes(t,
			namedArray{"prefill_isl", npyArray(t, "<f8", false, []int{2}, []float64{500, 500})},
			namedArray{"prefill_ttft", npyArray(t, "<f8", false, []int{2}, []float64{30, 31})},
		), dec, []string{profilePrefillNPZ, "measures 500 twice"}},
		{"prefill arrays that do not pair", npzBytes(t,
			namedArray{"prefill_isl", npyArray(t, "<f8", false, []int{2}, []float64{500, 600})},
			namedArray{"prefill_ttft", npyArray(t, "<f8", false, []int{1}, []float64{30})},
		), dec, []string{"prefill_isl has 2 points, prefill_ttft 1"}},
		{"no max_kv_tokens", pre, npzBytes(t,
			namedArray{"x_kv_usage", npyArray(t, "<f8", false, []int{1}, []float64{0.5})},
		), []string{profileDecodeNPZ, `no array "max_kv_tokens"`, "x_kv_usage"}},
		{"decode arrays that do not pair", pre, npzBytes(t,
			namedArray{"max_kv_tokens", npyArray(t, "<i8", false, []int{1}, []float64{1000})},
			namedArray{"x_kv_usage", npyArray(t, "<f8", false, []int{2}, []float64{0.5, 0.6})},
			namedArray{"y_context_length", npyArray(t, "<f8", false, []int{2}, []float64{100, 100})},
			namedArray{"z_itl", npyArray(t, "<f8", false, []int{1}, []float64{5})},
		), []string{"have 2, 2 and 1 points"}},
		{"a point measured twice", pre, npzBytes(t,
			namedArray{"max_kv_tokens", npyArray(t, "<i8", false, []int{1}, []float64{1000})},
			namedArray{"x_kv_usage", npyArray(t, "<f8", false, []int{2}, []float64{0.5, 0.5})},
			namedArray{"y_context_length", npyArray(t, "<f8", false, []int{2}, []float64{100, 100})},
			namedArray{"z_itl", npyArray(t, "<f8", false, []int{2}, []float64{5, 6})},
		), []string{"context length 100 is measured twice at 500 KV tokens"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromProfile(write(t, c.prefill, c.decode))
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}

	// A directory missing one file is not a results directory.
	dir := t.TempDir()
	p := filepath.Join(dir, filepath.FromSlash(profilePrefillNPZ))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, pre, 0o600))
	_, err := FromProfile(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a profiler results directory")
	assert.Contains(t, err.Error(), profileDecodeNPZ)
}

// The older profiler layout: the same arrays as JSON, prefill_raw_data.json
// and decode_raw_data.json side by side (testdata/profile_results_json
// holds the points of testdata/profile_results, max_kv_tokens a plain
// number), give the table the NPZ directory gives; a directory may mix
// the two layouts, one file per role.
func TestFromProfile_OlderJSONResults(t *testing.T) {
	t.Parallel()
	want, err := loadProfileDir(filepath.Join("testdata", "profile_results"))
	require.NoError(t, err)
	jsonDir := filepath.Join("testdata", "profile_results_json")
	got, err := loadProfileDir(jsonDir)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	m, err := FromProfile(jsonDir)
	require.NoError(t, err)
	assert.InDelta(t, 90.0, m.PrefillMs(1, 1500, 0), 1e-9)
	assert.InDelta(t, 6.75, m.DecodeMs(1, 20000, 0, 900), 1e-9)

	mixed := t.TempDir()
	npz := filepath.Join(mixed, filepath.FromSlash(profilePrefillNPZ))
	require.NoError(t, os.MkdirAll(filepath.Dir(npz), 0o755))
	require.NoError(t, os.WriteFile(npz, testdataNPZ(t)[filepath.FromSlash("profile_results/"+profilePrefillNPZ)], 0o600))
	dec, err := os.ReadFile(filepath.Join(jsonDir, profileDecodeJSON))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mixed, profileDecodeJSON), dec, 0o600))
	got, err = loadProfileDir(mixed)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestFromProfile_OlderJSONResultsErrors(t *testing.T) {
	t.Parallel()
	pre := `{"prefill_isl": [500, 1000], "prefill_ttft": [30, 62]}`
	write := func(t *testing.T, prefill, decode string) string {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, profilePrefillJSON), []byte(prefill), 0o600))
		if decode != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, profileDecodeJSON), []byte(decode), 0o600))
		}
		return dir
	}
	for _, c := range []struct {
		name, prefill, decode string
		want                  []string
	}{
		{"max_kv_tokens not a number", pre, `{"max_kv_tokens": "many", "x_kv_usage": [0.5], "y_context_length": [100], "z_itl": [5]}`,
			[]string{profileDecodeJSON, "max_kv_tokens", "want a number or an array of numbers"}},
		{"no z_itl", pre, `{"max_kv_tokens": 1000, "x_kv_usage": [0.5], "y_context_length": [100]}`,
			[]string{profileDecodeJSON, `no array "z_itl"`, "x_kv_usage"}},
		{"not an object", pre, `[1, 2]`, []string{profileDecodeJSON, "want a JSON object of arrays"}},
		{"prefill arrays that do not pair", `{"prefill_isl": [500], "prefill_ttft": [30, 62]}`,
			`{"max_kv_tokens": 1000, "x_kv_usage": [0.5], "y_context_length": [100], "z_itl": [5]}`,
			[]string{profilePrefillJSON, "prefill_isl has 1 points, prefill_ttft 2"}},
		{"no decode file", pre, "", []string{"not a profiler results directory", profileDecodeJSON}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromProfile(write(t, c.prefill, c.decode))
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
