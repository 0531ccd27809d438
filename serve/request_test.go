package serve

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/zeebo/xxh3"

	"github.com/kvstrand/mocker/cluster"
)

// TestParseTokenIDs_AgreesWithEncodingJSON: the reflection-free reader of
// token id arrays gives what encoding/json gives for plain integer
// arrays, and declines (for the item by item walk) whatever else.
func TestParseTokenIDs_AgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`[1,2,3]`, ` [ 0 , 17 ,4294967295 ] `, "[\n1,\t2\r]", `[7]`,
	} {
		got, ok := parseTokenIDs([]byte(in))
		var want []uint32
		if assert.NoError(t, json.Unmarshal([]byte(in), &want), in) {
			assert.True(t, ok, in)
			assert.Equal(t, want, got, in)
		}
	}
	for _, in := range []string{
		`[]`, `[4294967296]`, `[-1]`, `[1.0]`, `[1e3]`, `[01]`, `[1,]`, `[1 2]`, `[1,"a"]`, `[[1]]`, `[1]x`, `[1`, `1`, ``, `[99999999999999999999999]`,
	} {
		_, ok := parseTokenIDs([]byte(in))
		assert.False(t, ok, in)
	}
}

// TestDecodeCommon_AgreesWithEncodingJSON: whenever the reflection-free
// reader takes a body, it reads what encoding/json reads.
func TestDecodeCommon_AgreesWithEncodingJSON(t *testing.T) {
	taken := 0
	for _, in := range []string{
		`{"model":"mocker","prompt":[1,2,3],"max_tokens":16,"stream":false}`,
		` { "prompt" : "hi \"there\"" , "stream" : true , "max_tokens" : -3 , "n" : 1 } `,
		`{"prompt":[[1,2]],"kv_transfer_params":{"do_remote_decode":true,"x":[1,{"y":"}"}]},"temperature":0.5,"stop":["\n"]}`,
		`{"prompt":null,"kv_transfer_params":null}`,
		`{"prompt":"a","max_completion_tokens":7,"max_tokens":1,"max_tokens":2}`,
		`{}`,
		`{"user":"x","logit_bias":{"1":2},"echo":false,"seed":null}`,
		// Declined: encoding/json reads these with its own rules.
		`{"Model":"x"}`, `{"MAX_TOKENS":3}`, `{"model":"é"}`, `{"model":"a\nb"}`, `{"model":null}`,
		`{"max_tokens":1.5}`, `{"max_tokens":1e3}`, `{"max_tokens":"3"}`, `{"max_tokens":null}`, `{"max_tokens":12345678901234567890}`,
		`{"stream":null}`, `{"stream":"true"}`, `{"messages":[{"role":"user","content":"x"}]}`,
		`{"stream_options":{"include_usage":true}}`, `[1]`, `"x"`, `{"a\u0062":1}`,
		// Declined: not JSON (encoding/json names the fault).
		`{"prompt":[1,2,}`, `{"prompt":[1,2]`, `{"prompt":"abc}`, `{"prompt":"a\`, `{"prompt":[1]}}`, `{"prompt":[1]}x`,
		`{"max_tokens":01}`, `{"max_tokens":-}`, `{"stream":tru}`, `{"x":tru}`, `{"x":[1,}`, `{"x":"\q"}`, `{"kv_transfer_params":{"a":}}`,
		`{"prompt":[1] "n":1}`, `{"prompt":[1],}`, `{,}`, `{"model"}`, `{"model":}`, `{"prompt":"\ud800"x}`, "{\"prompt\":\"\xff\"",
	} {
		var want, got openaiRequest
		wantErr := json.Unmarshal([]byte(in), &want)
		if !decodeCommon([]byte(in), &got) {
			continue
		}
		taken++
		if assert.NoError(t, wantErr, in) {
			if got.promptIDs != nil {
				ids, _, e := (&Server{}).completionPrompt(want.Prompt)
				assert.Nil(t, e, in)
				assert.Equal(t, ids, got.promptIDs, in)
			}
			got.promptIDs = nil // what encoding/json leaves to completionPrompt
			assert.Equal(t, want, got, in)
		}
	}
	assert.Equal(t, 7, taken, "bodies read without encoding/json")
}

// TestResponseID_HashThenSequence: a server's own ids are the prefix, the
// XXH3 hash of "n/seed" in hex, then n in hex.
func TestResponseID_HashThenSequence(t *testing.T) {
	s := &Server{opts: Options{Seed: 18446744073709551615}}
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	for n := uint64(1); n <= 3; n++ {
		want := "chatcmpl-" + strconv.FormatUint(xxh3.HashString(strconv.FormatUint(n, 10)+"/18446744073709551615"), 16) + strconv.FormatUint(n, 16)
		assert.Equal(t, want, s.responseID(r, true))
	}
	r.Header.Set("X-Request-Id", "abc")
	assert.Equal(t, "cmpl-abc", s.responseID(r, false))
}

// TestModeledHeaders_AsSetWouldWrite: the latency headers, written
// straight into the map, are what Header.Set would have written.
func TestModeledHeaders_AsSetWouldWrite(t *testing.T) {
	for _, res := range []cluster.Result{
		{OutputTokens: 16, TTFTMs: 12.3456, QueueMs: 0, E2EMs: 1234567.0004},
		{OutputTokens: 1, TTFTMs: 1e-9, QueueMs: 3.25},
		{OutputTokens: 0, HoldOutcome: "transferred", HoldMs: 1.5, TransferMs: 2},
		{OutputTokens: 2, TTFTMs: 7, E2EMs: 9, HoldOutcome: "aborted", HoldMs: 100},
	} {
		want := http.Header{}
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
		if res.HoldOutcome != "" {
			want.Set(HeaderHold, f(res.HoldMs))
			want.Set(HeaderTransfer, f(res.TransferMs))
		}
		if res.OutputTokens > 0 {
			want.Set(HeaderTTFT, f(res.TTFTMs))
			want.Set(HeaderQueue, f(res.QueueMs))
			if res.E2EMs > 0 {
				want.Set(HeaderE2E, f(res.E2EMs))
			}
		}
		got := http.Header{}
		modeledHeaders(got, &res)
		assert.Equal(t, want, got)
	}
}
