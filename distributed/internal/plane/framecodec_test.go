package plane

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillRandom sets v (a settable value) to random contents: pointers and
// slices nil, empty or filled, every scalar drawn.
func fillRandom(r *rand.Rand, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Pointer:
		if depth > 6 || r.IntN(3) == 0 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fillRandom(r, v.Elem(), depth+1)
	case reflect.Slice:
		if depth > 6 {
			return
		}
		switch r.IntN(4) {
		case 0:
			return
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		n := 1 + r.IntN(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range s.Len() {
			fillRandom(r, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillRandom(r, v.Field(i), depth+1)
			}
		}
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.String:
		v.SetString([]string{"", "x", "abort", "a longer reason string"}[r.IntN(4)])
	case reflect.Float32, reflect.Float64:
		v.SetFloat([]float64{0, 1.5, -2.25, 1e12}[r.IntN(4)])
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := v.Type().Bits()
		v.SetInt(int64(r.Uint64()) >> (64 - bits) >> r.IntN(bits))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		bits := v.Type().Bits()
		v.SetUint(r.Uint64() >> (64 - bits) >> r.IntN(bits))
	}
}

// TestFrameCodec_IsTheReflectionCodec: random frames, every field and
// nesting drawn (nil, empty and filled slices and pointers alike), encode
// in code to the bytes the MessagePack library's reflection writes, and
// decode to what its reflection decodes from them; a body cut anywhere is
// refused.
func TestFrameCodec_IsTheReflectionCodec(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		var f Frame
		fillRandom(r, reflect.ValueOf(&f).Elem(), 0)
		for j := range f.Items {
			if it := f.Items[j].Input; it != nil {
				it.Cmd.Params = nil // a command's own codec gives nil for empty
			}
		}
		body, err := EncodeFrame(&f)
		require.NoError(t, err)
		reflected, err := appendBody(nil, &f)
		require.NoError(t, err)
		require.Equal(t, reflected, body, "frame %d: the bytes reflection writes", i)
		var want, got Frame
		require.NoError(t, decodeBody(body, &want))
		require.NoError(t, DecodeFrame(body, &got), "frame %d", i)
		if !assert.Equal(t, want, got, "frame %d", i) {
			return
		}
		cut := r.IntN(len(body))
		assert.Error(t, DecodeFrame(body[:cut], &got), "frame %d cut at %d of %d bytes", i, cut, len(body))
	}
}

// TestDecodeFrame_RefusesAnotherShape: a struct with a field more or less
// than the type's, and an array claiming more elements than the message
// has bytes, are errors, not misreadings.
func TestDecodeFrame_RefusesAnotherShape(t *testing.T) {
	t.Parallel()
	var f Frame
	// fixarray of 10 fields (a Frame has 11), then ten zeros.
	assert.Error(t, DecodeFrame(append([]byte{0x9a}, make([]byte, 10)...), &f))
	// 11 fields whose Items claims 0xffff elements in a few bytes.
	body := []byte{0x9b, 0x00, 0xdc, 0xff, 0xff, 0x00}
	assert.ErrorIs(t, DecodeFrame(body, &f), errShort)
	// nil and an empty array are the zero frame, as reflection has them.
	for _, b := range [][]byte{{0xc0}, {0x90}} {
		f = Frame{Seq: 3}
		require.NoError(t, DecodeFrame(b, &f))
		assert.Equal(t, Frame{}, f)
	}
}
