package perf

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// npzMagic starts every zip archive, and so every NPZ file; a JSON table
// cannot start with it.
var npzMagic = []byte("PK\x03\x04")

// npzArrays are the arrays of an NPZ archive by name, read on demand.
type npzArrays map[string]*zip.File

// readNPZ opens an NPZ archive held in data.
func readNPZ(data []byte) (npzArrays, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("read NPZ archive: %w", err)
	}
	arrays := npzArrays{}
	for _, f := range zr.File {
		arrays[strings.TrimSuffix(f.Name, ".npy")] = f
	}
	return arrays, nil
}

// array reads array name, which must have dims dimensions, as row-major
// float64 values and its shape.
func (a npzArrays) array(name string, dims int) ([]float64, []int, error) {
	f, ok := a[name]
	if !ok {
		return nil, nil, fmt.Errorf("NPZ has no array %q (it has %s)", name, strings.Join(slices.Sorted(maps.Keys(a)), ", "))
	}
	rc, err := f.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("NPZ array %s: %w", name, err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("NPZ array %s: %w", name, err)
	}
	vals, shape, err := decodeNPY(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("NPZ array %s: %w", name, err)
	}
	if len(shape) != dims {
		return nil, nil, fmt.Errorf("NPZ array %s has shape %v; want %d dimension(s)", name, shape, dims)
	}
	return vals, shape, nil
}

// vector reads the one-dimensional array name.
func (a npzArrays) vector(name string) ([]float64, error) {
	v, _, err := a.array(name, 1)
	return v, err
}

// decodeNPZTable reads a Table from a NumPy .npz archive holding the five
// arrays under their Table JSON names (Dynamo's mocker-format NPZ, which
// its mocker converts a profiler's results into). Other arrays are
// ignored, as Dynamo ignores them.
func decodeNPZTable(data []byte) (Table, error) {
	arrays, err := readNPZ(data)
	if err != nil {
		return Table{}, err
	}
	read := func(name string, dims int) ([]float64, []int, error) {
		if _, ok := arrays[name]; !ok {
			return nil, nil, fmt.Errorf("NPZ has no array %q (want prefill_isl, prefill_ttft_ms, decode_active_kv_tokens, decode_context_length, decode_itl; "+
				"or give the profiler's results directory, which holds %s and %s)", name, profilePrefillNPZ, profileDecodeNPZ)
		}
		return arrays.array(name, dims)
	}
	var t Table
	for _, a := range []struct {
		name string
		dst  *[]float64
	}{
		{"prefill_isl", &t.PrefillISL},
		{"prefill_ttft_ms", &t.PrefillTTFTMs},
		{"decode_active_kv_tokens", &t.DecodeActiveKVTokens},
		{"decode_context_length", &t.DecodeContextLength},
	} {
		vals, _, err := read(a.name, 1)
		if err != nil {
			return Table{}, err
		}
		*a.dst = vals
	}
	vals, shape, err := read("decode_itl", 2)
	if err != nil {
		return Table{}, err
	}
	t.DecodeITLMs = make([][]float64, shape[0])
	for i := range t.DecodeITLMs {
		t.DecodeITLMs[i] = vals[i*shape[1] : (i+1)*shape[1]]
	}
	return t, nil
}

var (
	npyDescr   = regexp.MustCompile(`'descr'\s*:\s*'([^']*)'`)
	npyFortran = regexp.MustCompile(`'fortran_order'\s*:\s*(True|False)`)
	npyShape   = regexp.MustCompile(`'shape'\s*:\s*\(([^)]*)\)`)
)

// decodeNPY reads one .npy array of little-endian numbers into row-major
// float64 values and its shape.
func decodeNPY(raw []byte) ([]float64, []int, error) {
	if len(raw) < 10 || string(raw[:6]) != "\x93NUMPY" {
		return nil, nil, fmt.Errorf("not a .npy array")
	}
	var hlen, start int
	switch raw[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(raw[8:10])), 10
	case 2, 3:
		if len(raw) < 12 {
			return nil, nil, fmt.Errorf("truncated .npy header")
		}
		hlen, start = int(binary.LittleEndian.Uint32(raw[8:12])), 12
	default:
		return nil, nil, fmt.Errorf(".npy format version %d is not supported", raw[6])
	}
	if start+hlen > len(raw) {
		return nil, nil, fmt.Errorf("truncated .npy header")
	}
	header, body := string(raw[start:start+hlen]), raw[start+hlen:]

	descr := npyDescr.FindStringSubmatch(header)
	fortran := npyFortran.FindStringSubmatch(header)
	shapeM := npyShape.FindStringSubmatch(header)
	if descr == nil || fortran == nil || shapeM == nil {
		return nil, nil, fmt.Errorf("unreadable .npy header %q", header)
	}
	var shape []int
	count := 1
	for _, s := range strings.Split(shapeM[1], ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, nil, fmt.Errorf("bad .npy shape %q", shapeM[1])
		}
		if n > 0 && count > len(raw)/n {
			return nil, nil, fmt.Errorf(".npy shape (%s) is larger than the file", shapeM[1])
		}
		shape = append(shape, n)
		count *= n
	}
	width, read, err := npyElement(descr[1])
	if err != nil {
		return nil, nil, err
	}
	if len(body) < count*width {
		return nil, nil, fmt.Errorf(".npy data holds %d bytes, shape %v of %s needs %d", len(body), shape, descr[1], count*width)
	}
	vals := make([]float64, count)
	for i := range vals {
		vals[i] = read(body[i*width:])
	}
	if fortran[1] == "True" && len(shape) == 2 {
		rows, cols := shape[0], shape[1]
		rowMajor := make([]float64, count)
		for r := 0; r < rows; r++ {
			for c := 0; c < cols; c++ {
				rowMajor[r*cols+c] = vals[c*rows+r]
			}
		}
		vals = rowMajor
	}
	return vals, shape, nil
}

// npyElement returns the byte width and reader of a NumPy dtype string;
// only the little-endian numeric types profiles use are supported.
func npyElement(descr string) (int, func([]byte) float64, error) {
	le := binary.LittleEndian
	switch descr {
	case "<f8":
		return 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) }, nil
	case "<f4":
		return 4, func(b []byte) float64 { return float64(math.Float32frombits(le.Uint32(b))) }, nil
	case "<i8":
		return 8, func(b []byte) float64 { return float64(int64(le.Uint64(b))) }, nil
	case "<i4":
		return 4, func(b []byte) float64 { return float64(int32(le.Uint32(b))) }, nil
	case "<u8":
		return 8, func(b []byte) float64 { return float64(le.Uint64(b)) }, nil
	case "<u4":
		return 4, func(b []byte) float64 { return float64(le.Uint32(b)) }, nil
	}
	return 0, nil, fmt.Errorf(".npy dtype %q is not supported (want little-endian f8, f4, i8, i4, u8 or u4)", descr)
}
