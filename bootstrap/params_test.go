package bootstrap

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseVLLMParams_Valid(t *testing.T) {
	t.Parallel()
	want := VLLMParams{TransferID: 42, PrefillHost: "10.0.0.7", PrefillPort: 7001, TransferToken: testToken}
	tests := []struct {
		name string
		raw  any
	}{
		{"raw message", json.RawMessage(`{"transfer_id":42,"prefill_host":"10.0.0.7","prefill_port":7001,"transfer_token":"00112233445566778899aabbccddeeff"}`)},
		{"bytes with extra key", []byte(` {"transfer_id":42,"prefill_host":"10.0.0.7","prefill_port":7001,"transfer_token":"00112233445566778899aabbccddeeff","handoff_id":"x"} `)},
		{"decoded map, float64 numbers", map[string]any{"transfer_id": 42.0, "prefill_host": "10.0.0.7", "prefill_port": 7001.0, "transfer_token": "00112233445566778899aabbccddeeff"}},
		{"decoded map, json.Number", map[string]any{"transfer_id": json.Number("42"), "prefill_host": "10.0.0.7", "prefill_port": json.Number("7001"), "transfer_token": "00112233445566778899aabbccddeeff"}},
		{"script map, int64", map[string]any{"transfer_id": int64(42), "prefill_host": "10.0.0.7", "prefill_port": int64(7001), "transfer_token": "00112233445566778899aabbccddeeff"}},
		{"script map, int and uint64", map[string]any{"transfer_id": uint64(42), "prefill_host": "10.0.0.7", "prefill_port": 7001, "transfer_token": testToken}},
		{"struct", want},
		{"struct pointer", &want},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, present, err := ParseVLLMParams(tt.raw)
			require.NoError(t, err)
			assert.True(t, present)
			assert.Equal(t, want, got)
		})
	}
}

func TestParseVLLMParams_LargeIDSurvivesJSON(t *testing.T) {
	t.Parallel()
	got, _, err := ParseVLLMParams(json.RawMessage(`{"transfer_id":18446744073709551615,"prefill_host":"h","prefill_port":1,"transfer_token":"00112233445566778899aabbccddeeff"}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(18446744073709551615), got.TransferID)
}

func TestParseVLLMParams_RoundTripsMarshal(t *testing.T) {
	t.Parallel()
	in := VLLMParams{TransferID: 3, PrefillHost: "prefill-1", PrefillPort: 40000, TransferToken: testToken}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	assert.JSONEq(t, `{"transfer_id":3,"prefill_host":"prefill-1","prefill_port":40000,"transfer_token":"00112233445566778899aabbccddeeff"}`, string(b))
	got, present, err := ParseVLLMParams(json.RawMessage(b))
	require.NoError(t, err)
	assert.True(t, present)
	assert.Equal(t, in, got)
	assert.Equal(t, "prefill-1:40000", got.Addr())
}

func TestParseParams_Absent(t *testing.T) {
	t.Parallel()
	var nilPtr *VLLMParams
	var nilSG *SGLangParams
	var nilMap map[string]any
	for name, raw := range map[string]any{
		"nil": nil, "empty raw": json.RawMessage(nil), "blank": []byte("  \n"),
		"json null": json.RawMessage("null"), "nil map": nilMap,
	} {
		_, present, err := ParseVLLMParams(raw)
		require.NoError(t, err, name)
		assert.False(t, present, name)
		_, present, err = ParseSGLangParams(raw)
		require.NoError(t, err, name)
		assert.False(t, present, name)
	}
	_, present, err := ParseVLLMParams(nilPtr)
	require.NoError(t, err)
	assert.False(t, present)
	_, present, err = ParseSGLangParams(nilSG)
	require.NoError(t, err)
	assert.False(t, present)
}

func vllmMap(overrides map[string]any, drop ...string) map[string]any {
	m := map[string]any{"transfer_id": 42.0, "prefill_host": "10.0.0.7", "prefill_port": 7001.0, "transfer_token": testToken.String()}
	for k, v := range overrides {
		m[k] = v
	}
	for _, k := range drop {
		delete(m, k)
	}
	return m
}

func TestParseVLLMParams_MalformedNamesField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		raw   any
		field string
	}{
		{"missing transfer_id", vllmMap(nil, "transfer_id"), "transfer_id"},
		{"zero transfer_id", vllmMap(map[string]any{"transfer_id": 0.0}), "transfer_id"},
		{"negative transfer_id", vllmMap(map[string]any{"transfer_id": -1.0}), "transfer_id"},
		{"fractional transfer_id", vllmMap(map[string]any{"transfer_id": 1.5}), "transfer_id"},
		{"inexact float transfer_id", vllmMap(map[string]any{"transfer_id": 1e19}), "transfer_id"},
		{"string transfer_id", vllmMap(map[string]any{"transfer_id": "42"}), "transfer_id"},
		{"null transfer_id", vllmMap(map[string]any{"transfer_id": nil}), "transfer_id"},
		{"negative int transfer_id", vllmMap(map[string]any{"transfer_id": int64(-3)}), "transfer_id"},
		{"missing prefill_host", vllmMap(nil, "prefill_host"), "prefill_host"},
		{"empty prefill_host", vllmMap(map[string]any{"prefill_host": ""}), "prefill_host"},
		{"wildcard prefill_host", vllmMap(map[string]any{"prefill_host": "0.0.0.0"}), "prefill_host"},
		{"numeric prefill_host", vllmMap(map[string]any{"prefill_host": 10.0}), "prefill_host"},
		{"missing prefill_port", vllmMap(nil, "prefill_port"), "prefill_port"},
		{"zero prefill_port", vllmMap(map[string]any{"prefill_port": 0.0}), "prefill_port"},
		{"huge prefill_port", vllmMap(map[string]any{"prefill_port": 70000.0}), "prefill_port"},
		{"string prefill_port", vllmMap(map[string]any{"prefill_port": "7001"}), "prefill_port"},
		{"json port out of range", json.RawMessage(`{"transfer_id":1,"prefill_host":"h","prefill_port":65536}`), "prefill_port"},
		{"json bool id", json.RawMessage(`{"transfer_id":true,"prefill_host":"h","prefill_port":1}`), "transfer_id"},
		{"missing transfer_token", vllmMap(nil, "transfer_token"), "transfer_token"},
		{"zero transfer_token", vllmMap(map[string]any{"transfer_token": Token{}.String()}), "transfer_token"},
		{"short transfer_token", vllmMap(map[string]any{"transfer_token": "0011"}), "transfer_token"},
		{"non-hex transfer_token", vllmMap(map[string]any{"transfer_token": "zz112233445566778899aabbccddeeff"}), "transfer_token"},
		{"numeric transfer_token", vllmMap(map[string]any{"transfer_token": 7.0}), "transfer_token"},
		{"struct zero id", VLLMParams{PrefillHost: "h", PrefillPort: 1}, "transfer_id"},
		{"struct zero token", VLLMParams{TransferID: 1, PrefillHost: "h", PrefillPort: 1}, "transfer_token"},
		{"struct negative port", VLLMParams{TransferID: 1, PrefillHost: "h", PrefillPort: -1}, "prefill_port"},
		{"dummy string", "dummy", ""},
		{"json dummy string", json.RawMessage(`"dummy"`), ""},
		{"json array", json.RawMessage(`[1,2]`), ""},
		{"invalid json", json.RawMessage(`{"transfer_id":`), ""},
		{"trailing json", json.RawMessage(`{} {}`), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, present, err := ParseVLLMParams(tt.raw)
			assert.True(t, present, "malformed params are present, never a fallback to aggregated")
			require.ErrorIs(t, err, ErrBadParams)
			var pe *ParamsError
			require.True(t, errors.As(err, &pe))
			assert.Equal(t, "vllm", pe.Engine)
			assert.Equal(t, tt.field, pe.Field)
			if tt.field != "" {
				assert.Contains(t, err.Error(), tt.field)
			}
		})
	}
}

func TestParseSGLangParams(t *testing.T) {
	t.Parallel()
	want := SGLangParams{BootstrapHost: "prefill-2", BootstrapPort: 8998, BootstrapRoom: 5, BootstrapToken: testToken}
	got, present, err := ParseSGLangParams(json.RawMessage(`{"bootstrap_host":"prefill-2","bootstrap_port":8998,"bootstrap_room":5,"bootstrap_token":"00112233445566778899aabbccddeeff"}`))
	require.NoError(t, err)
	assert.True(t, present)
	assert.Equal(t, want, got)
	assert.Equal(t, "prefill-2:8998", got.Addr())

	base := func(overrides map[string]any, drop ...string) map[string]any {
		m := map[string]any{"bootstrap_host": "prefill-2", "bootstrap_port": 8998.0, "bootstrap_room": 5.0, "bootstrap_token": testToken.String()}
		for k, v := range overrides {
			m[k] = v
		}
		for _, k := range drop {
			delete(m, k)
		}
		return m
	}
	got, _, err = ParseSGLangParams(base(nil))
	require.NoError(t, err)
	assert.Equal(t, want, got)

	tests := []struct {
		name  string
		raw   any
		field string
	}{
		{"missing host", base(nil, "bootstrap_host"), "bootstrap_host"},
		{"wildcard host", base(map[string]any{"bootstrap_host": "::"}), "bootstrap_host"},
		{"missing port", base(nil, "bootstrap_port"), "bootstrap_port"},
		{"port zero", base(map[string]any{"bootstrap_port": 0.0}), "bootstrap_port"},
		{"port string", base(map[string]any{"bootstrap_port": "8998"}), "bootstrap_port"},
		{"missing room", base(nil, "bootstrap_room"), "bootstrap_room"},
		{"zero room", base(map[string]any{"bootstrap_room": 0.0}), "bootstrap_room"},
		{"room wrong type", base(map[string]any{"bootstrap_room": []any{1.0}}), "bootstrap_room"},
		{"struct zero room", SGLangParams{BootstrapHost: "h", BootstrapPort: 1}, "bootstrap_room"},
		{"missing token", base(nil, "bootstrap_token"), "bootstrap_token"},
		{"token wrong type", base(map[string]any{"bootstrap_token": true}), "bootstrap_token"},
		{"not an object", json.RawMessage(`42`), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, present, err := ParseSGLangParams(tt.raw)
			assert.True(t, present)
			var pe *ParamsError
			require.True(t, errors.As(err, &pe), "got %v", err)
			assert.Equal(t, "sglang", pe.Engine)
			assert.Equal(t, tt.field, pe.Field)
		})
	}
}
