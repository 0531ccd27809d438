package perf

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// npyArray builds a version-1 .npy file the way NumPy lays one out: magic,
// version, header length, a Python-dict header padded with spaces to a
// 64-byte boundary and ended by a newline, then the raw data.
func npyArray(t *testing.T, descr string, fortran bool, shape []int, vals []float64) []byte {
	t.Helper()
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	shapeStr := strings.Join(dims, ", ")
	if len(shape) == 1 {
		shapeStr += ","
	}
	order := "False"
	if fortran {
		order = "True"
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }", descr, order, shapeStr)
	pad := 64 - (10+len(header)+1)%64
	header += strings.Repeat(" ", pad%64) + "\n"

	var buf bytes.Buffer
	buf.WriteString("\x93NUMPY\x01\x00")
	require.NoError(t, binary.Write(&buf, binary.LittleEndian, uint16(len(header))))
	buf.WriteString(header)
	for _, v := range vals {
		switch descr {
		case "<f8", ">f8":
			require.NoError(t, binary.Write(&buf, binary.LittleEndian, v))
		case "<f4":
			require.NoError(t, binary.Write(&buf, binary.LittleEndian, float32(v)))
		case "<i8":
			require.NoError(t, binary.Write(&buf, binary.LittleEndian, int64(v)))
		case "<i4":
			require.NoError(t, binary.Write(&buf, binary.LittleEndian, int32(v)))
		default:
			t.Fatalf("test helper does not write %s", descr)
		}
	}
	return buf.Bytes()
}

func writeNPZ(t *testing.T, arrays map[string][]byte) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, data := range arrays {
		w, err := zw.Create(name + ".npy")
		require.NoError(t, err)
		_, err = w.Write(data)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	p := filepath.Join(t.TempDir(), "raw_data.npz")
	require.NoError(t, os.WriteFile(p, buf.Bytes(), 0o600))
	return p
}

// exampleNPZ holds the same numbers as testdata/profile.json in a mix of
// dtypes, with decode_itl in column-major order and an extra array.
func exampleNPZ(t *testing.T) map[string][]byte {
	return map[string][]byte{
		"prefill_isl":             npyArray(t, "<i8", false, []int{4}, []float64{128, 512, 1024, 2048}),
		"prefill_ttft_ms":         npyArray(t, "<f8", false, []int{4}, []float64{20, 40, 70, 130}),
		"decode_active_kv_tokens": npyArray(t, "<i4", false, []int{3}, []float64{1000, 5000, 9000}),
		"decode_context_length":   npyArray(t, "<f4", false, []int{2}, []float64{100, 1100}),
		// Rows (active) 3 × columns (context) 2, stored column by column.
		"decode_itl":   npyArray(t, "<f8", true, []int{3, 2}, []float64{5, 9, 13, 6, 11, 16}),
		"decode_kv_gb": npyArray(t, "<f8", false, []int{1}, []float64{80}),
	}
}

func TestLoadInterpolated_NPZ(t *testing.T) {
	t.Parallel()
	m, err := LoadInterpolated(writeNPZ(t, exampleNPZ(t)))
	require.NoError(t, err)
	assert.InDelta(t, 30.0, m.PrefillMs(1, 320, 0), 1e-9)
	assert.InDelta(t, 250.0, m.PrefillMs(1, 4096, 0), 1e-9)
	assert.InDelta(t, 9.0, m.DecodeMs(1, 5000, 0, 100), 1e-9)
	assert.InDelta(t, 11.0, m.DecodeMs(1, 5000, 0, 1100), 1e-9, "column-major grid read as rows")
	assert.InDelta(t, 7.75, m.DecodeMs(1, 3000, 0, 600), 1e-9)

	// The same numbers as the JSON example give the same model.
	j := loadExample(t)
	for _, p := range [][2]float64{{0, 0}, {2500, 300}, {9000, 1100}, {20000, 5000}} {
		assert.InDelta(t, j.DecodeMs(2, p[0], 0, p[1]), m.DecodeMs(2, p[0], 0, p[1]), 1e-9)
	}
}

func TestLoadInterpolated_NPZErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		modify func(map[string][]byte)
		says   string
	}{
		{"missing array", func(a map[string][]byte) { delete(a, "decode_itl") }, `no array "decode_itl"`},
		{"big endian", func(a map[string][]byte) {
			a["prefill_isl"] = npyArray(t, ">f8", false, []int{4}, []float64{1, 2, 3, 4})
		}, `dtype ">f8" is not supported`},
		{"axis not 1-D", func(a map[string][]byte) {
			a["prefill_isl"] = npyArray(t, "<f8", false, []int{2, 2}, []float64{1, 2, 3, 4})
		}, "prefill_isl has shape [2 2]; want 1 dimension"},
		{"grid not 2-D", func(a map[string][]byte) {
			a["decode_itl"] = npyArray(t, "<f8", false, []int{6}, []float64{1, 2, 3, 4, 5, 6})
		}, "decode_itl has shape [6]; want 2 dimension"},
		{"truncated data", func(a map[string][]byte) {
			full := a["prefill_ttft_ms"]
			a["prefill_ttft_ms"] = full[:len(full)-8]
		}, "needs 32"},
		{"absurd shape", func(a map[string][]byte) {
			a["prefill_isl"] = []byte(strings.Replace(string(a["prefill_isl"]), "(4,)", "(9223372036854775807,)", 1))
		}, "larger than the file"},
		{"not npy", func(a map[string][]byte) { a["prefill_isl"] = []byte("hello world") }, "not a .npy array"},
		{"shape mismatch caught by table checks", func(a map[string][]byte) {
			a["decode_itl"] = npyArray(t, "<f8", false, []int{2, 3}, []float64{1, 2, 3, 4, 5, 6})
		}, "decode_itl has 2 rows"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			arrays := exampleNPZ(t)
			c.modify(arrays)
			_, err := LoadInterpolated(writeNPZ(t, arrays))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.says)
			assert.Contains(t, err.Error(), "raw_data.npz")
		})
	}
}

func TestDecodeNPY_Version2Header(t *testing.T) {
	t.Parallel()
	v1 := npyArray(t, "<f8", false, []int{2}, []float64{1.5, math.Pi})
	hlen := binary.LittleEndian.Uint16(v1[8:10])
	v2 := append([]byte("\x93NUMPY\x02\x00"), binary.LittleEndian.AppendUint32(nil, uint32(hlen))...)
	v2 = append(v2, v1[10:]...)
	vals, shape, err := decodeNPY(v2)
	require.NoError(t, err)
	assert.Equal(t, []int{2}, shape)
	assert.Equal(t, []float64{1.5, math.Pi}, vals)
}
