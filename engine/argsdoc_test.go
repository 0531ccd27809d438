package engine

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// acceptedKeys is what the parser accepts, as its unknown-key errors list it.
type acceptedKeys struct {
	modeled []string // "valid keys", sglang's dotted
	dynamo  []string // "also accepted from Dynamo (not modeled)"
}

func (k acceptedKeys) all() []string { return append(append([]string(nil), k.modeled...), k.dynamo...) }

var unknownKeyList = regexp.MustCompile(`valid keys in ([a-z ]+): ([^;]*)(?:; also accepted from Dynamo \(not modeled\): (.*))?$`)

// parserKeys reads the keys the parser accepts from the errors it gives for
// an unknown key at the top level and inside sglang: those errors are the
// parser's own list, so they move with it.
func parserKeys(t *testing.T) acceptedKeys {
	t.Helper()
	const unknown = "zzzz_no_such_key_zzzz"
	var keys acceptedKeys
	for _, tc := range []struct {
		input, where, prefix string
	}{
		{`{"` + unknown + `": 1}`, "engine args", ""},
		{`{"engine_type": "sglang", "sglang": {"` + unknown + `": 1}}`, "sglang", "sglang."},
	} {
		_, err := ParseArgs([]byte(tc.input))
		var ae *ArgError
		require.Truef(t, errors.As(err, &ae), "%s: want an *ArgError for an unknown key, got %v", tc.input, err)
		require.Equal(t, tc.prefix+unknown, ae.Field)
		m := unknownKeyList.FindStringSubmatch(ae.Message)
		require.NotNilf(t, m, "the unknown-key error no longer lists the valid keys as expected: %q", ae.Message)
		require.Equal(t, tc.where, m[1])
		for _, k := range strings.Split(m[2], ", ") {
			keys.modeled = append(keys.modeled, tc.prefix+k)
		}
		if m[3] != "" {
			for _, k := range strings.Split(m[3], ", ") {
				keys.dynamo = append(keys.dynamo, tc.prefix+k)
			}
		}
	}
	require.Greater(t, len(keys.modeled), 20, "the key list looks truncated")
	return keys
}

// docKeys maps every key and alias of ArgDocs to the entries naming it.
func docKeys() map[string][]ArgDoc {
	out := map[string][]ArgDoc{}
	for _, d := range ArgDocs {
		for _, k := range append([]string{d.Key}, d.Aliases...) {
			out[k] = append(out[k], d)
		}
	}
	return out
}

func TestArgDocs_EveryAcceptedKeyHasExactlyOneEntry(t *testing.T) {
	t.Parallel()
	docs := docKeys()
	for _, key := range parserKeys(t).all() {
		switch n := len(docs[key]); n {
		case 1:
		case 0:
			t.Errorf("engine arg %q is accepted by the parser but has no entry in engine.ArgDocs (engine/argsdoc.go): add one (or, for another name of a documented key, add it to that entry's Aliases), then run go generate ./cmd/mocker", key)
		default:
			t.Errorf("engine arg %q has %d entries in engine.ArgDocs (as a key or an alias); keep one", key, n)
		}
	}
}

func TestArgDocs_EveryEntryIsAnAcceptedKey(t *testing.T) {
	t.Parallel()
	accepted := map[string]bool{}
	for _, k := range parserKeys(t).all() {
		accepted[k] = true
	}
	for key := range docKeys() {
		assert.Truef(t, accepted[key], "engine.ArgDocs documents %q, which the parser does not accept: remove the entry or the alias", key)
	}
}

func TestArgDocs_SupportMatchesTheParser(t *testing.T) {
	t.Parallel()
	keys := parserKeys(t)
	docs := docKeys()
	for _, tc := range []struct {
		list []string
		want []ArgSupport
	}{
		{keys.modeled, []ArgSupport{ArgModeled}},
		{keys.dynamo, []ArgSupport{ArgIgnored, ArgOffOnly}},
	} {
		for _, k := range tc.list {
			for _, d := range docs[k] {
				assert.Containsf(t, tc.want, d.Support, "%s: the parser lists it among %v keys", k, tc.want)
			}
		}
	}
}

func TestArgDocs_EntriesAreComplete(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, d := range ArgDocs {
		assert.Falsef(t, seen[d.Key], "%s: two entries", d.Key)
		seen[d.Key] = true
		assert.NotEmptyf(t, d.Type, "%s: Type", d.Key)
		assert.NotEmptyf(t, d.Default, "%s: Default", d.Key)
		assert.NotEmptyf(t, d.Meaning, "%s: Meaning", d.Key)
		assert.Containsf(t, []ArgSupport{ArgModeled, ArgIgnored, ArgOffOnly}, d.Support, "%s: Support", d.Key)
		assert.Regexpf(t, `^(yes|no)\b`, d.Dynamo, "%s: Dynamo starts with yes or no", d.Key)
		assert.Truef(t, strings.HasSuffix(d.Meaning, "."), "%s: Meaning is a sentence: %q", d.Key, d.Meaning)
	}
}

// TestArgDocs_DefaultsMatchTheParser holds every default written as one
// JSON value, and every "none", to what ParseArgs gives for an empty
// object (for sglang.* keys: for an sglang engine). Prose defaults ("vllm
// 64, sglang 1") are for people and left alone.
func TestArgDocs_DefaultsMatchTheParser(t *testing.T) {
	t.Parallel()
	parsed := func(input string) map[string]any {
		a, err := ParseArgs([]byte(input))
		require.NoError(t, err)
		b, err := json.Marshal(a)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		return m
	}
	vllm := parsed(`{}`)
	sglang, _ := parsed(`{"engine_type": "sglang"}`)["sglang"].(map[string]any)
	require.NotNil(t, sglang)
	// Keys read into parser state rather than an Args field.
	notStored := map[string]bool{"is_prefill": true, "is_decode": true}
	checked := 0
	for _, d := range ArgDocs {
		if d.Support != ArgModeled || notStored[d.Key] {
			continue
		}
		m, key := vllm, d.Key
		if k, ok := strings.CutPrefix(d.Key, "sglang."); ok {
			m, key = sglang, k
		}
		got, present := m[key]
		if d.Default == "none" {
			assert.Truef(t, !present || got == nil, "%s: documented default none, the parser gives %v", d.Key, got)
			checked++
			continue
		}
		var want any
		if json.Unmarshal([]byte(d.Default), &want) != nil {
			continue
		}
		assert.Equalf(t, want, got, "%s: documented default %s", d.Key, d.Default)
		checked++
	}
	assert.Greater(t, checked, 20, "most defaults are single values")
}
