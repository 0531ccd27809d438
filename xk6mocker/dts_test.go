package xk6mocker

import (
	"errors"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/grafana/sobek"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/replay"
	"github.com/kvstrand/mocker/router"
)

// dts is what the tests read from index.d.ts: each interface's members
// (inherited ones included) and each string-literal union's members.
type dts struct {
	interfaces map[string][]string
	unions     map[string][]string
	text       string // without comments
}

var (
	dtsBlockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	dtsLineComment  = regexp.MustCompile(`(?m)//.*$`)
	dtsInterface    = regexp.MustCompile(`interface\s+(\w+)(?:\s+extends\s+([\w\s,]+?))?\s*\{`)
	dtsMember       = regexp.MustCompile(`^(?:readonly\s+)?([A-Za-z_$][\w$]*)\??\s*[:(]`)
	dtsUnion        = regexp.MustCompile(`type\s+(\w+)\s*=\s*([^;]+);`)
)

// readDTS parses the small subset of TypeScript index.d.ts is written in.
func readDTS(t *testing.T) dts {
	t.Helper()
	raw, err := os.ReadFile("index.d.ts")
	require.NoError(t, err)
	text := dtsLineComment.ReplaceAllString(dtsBlockComment.ReplaceAllString(string(raw), ""), "")
	d := dts{interfaces: map[string][]string{}, unions: map[string][]string{}, text: text}
	own := map[string][]string{}
	parents := map[string][]string{}
	for _, m := range dtsInterface.FindAllStringSubmatchIndex(text, -1) {
		name := text[m[2]:m[3]]
		if m[4] >= 0 {
			for _, p := range strings.Split(text[m[4]:m[5]], ",") {
				parents[name] = append(parents[name], strings.TrimSpace(p))
			}
		}
		body, err := dtsBody(text[m[1]:])
		require.NoErrorf(t, err, "interface %s", name)
		for _, member := range dtsSplit(body) {
			mm := dtsMember.FindStringSubmatch(member)
			require.NotNilf(t, mm, "interface %s: cannot read member %q", name, member)
			own[name] = append(own[name], mm[1])
		}
	}
	var members func(name string) []string
	members = func(name string) []string {
		out := append([]string(nil), own[name]...)
		for _, p := range parents[name] {
			require.Containsf(t, own, p, "interface %s extends %s, which is not declared", name, p)
			out = append(out, members(p)...)
		}
		return out
	}
	for name := range own {
		d.interfaces[name] = members(name)
	}
	for _, m := range dtsUnion.FindAllStringSubmatch(text, -1) {
		for _, alt := range strings.Split(m[2], "|") {
			d.unions[m[1]] = append(d.unions[m[1]], strings.Trim(strings.TrimSpace(alt), `'"`))
		}
	}
	return d
}

// dtsBody returns the text up to the brace closing the one just opened.
func dtsBody(s string) (string, error) {
	depth := 1
	for i, r := range s {
		switch r {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return s[:i], nil
			}
		}
	}
	return "", errors.New("unbalanced braces")
}

// dtsSplit splits an interface body into members at top-level semicolons.
func dtsSplit(body string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range body {
		switch {
		case r == '{' || r == '(' || r == '<':
			depth++
		case r == '>' && i > 0 && body[i-1] == '=': // an arrow, not a bracket
		case r == '}' || r == ')' || r == '>':
			depth--
		case r == ';':
			if depth == 0 {
				if m := strings.TrimSpace(body[start:i]); m != "" {
					out = append(out, m)
				}
				start = i + 1
			}
		}
	}
	if m := strings.TrimSpace(body[start:]); m != "" {
		out = append(out, m)
	}
	return out
}

// jsonNames lists a struct type's JSON field names, an embedded struct's
// among them.
func jsonNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		switch name, ok := jsonName(t.Field(i)); {
		case !ok:
		case name == "":
			out = append(out, jsonNames(t.Field(i).Type)...)
		default:
			out = append(out, name)
		}
	}
	return out
}

// validKeys reads the list an "unknown key; valid keys: a, b" error gives.
func validKeys(t *testing.T, err error) []string {
	t.Helper()
	require.Error(t, err)
	_, list, ok := strings.Cut(err.Error(), "valid keys: ")
	require.Truef(t, ok, "the error no longer lists the valid keys: %v", err)
	return strings.Split(list, ", ")
}

func sorted(ss []string) []string {
	out := append([]string(nil), ss...)
	sort.Strings(out)
	return out
}

// TestDTS_MatchesTheGoAPI holds each declaration of index.d.ts to the Go
// value it describes, both ways: a key the script sees (or the module
// accepts) that the d.ts lacks fails, and so does a d.ts member with no Go
// counterpart.
func TestDTS_MatchesTheGoAPI(t *testing.T) {
	t.Parallel()
	d := readDTS(t)
	rt := sobek.New()
	inst := &instance{rt: rt}
	keysOf := func(o *sobek.Object) []string { return o.Keys() }

	const unknown = "zzzz_no_such_key"
	_, cfgErr := cluster.ConfigFromMap(map[string]any{unknown: 1})
	_, poolErr := cluster.ConfigFromMap(map[string]any{"prefill": map[string]any{unknown: 1}})
	_, transportErr := cluster.ConfigFromMap(map[string]any{"transport": map[string]any{unknown: 1}})
	routerErr := cluster.Config{RouterOptions: map[string]any{unknown: 1}}.Validate()

	var engineArgs, sglangArgs []string
	for _, a := range engine.ArgDocs {
		for _, k := range append([]string{a.Key}, a.Aliases...) {
			if sub, ok := strings.CutPrefix(k, "sglang."); ok {
				sglangArgs = append(sglangArgs, sub)
			} else {
				engineArgs = append(engineArgs, k)
			}
		}
	}
	modes := make([]string, len(router.Modes))
	for i, m := range router.Modes {
		modes[i] = string(m)
	}

	interfaces := []struct {
		name string
		from string
		want []string
	}{
		{"Mocker", "the module's default export", keysOf(inst.Exports().Default.(*sobek.Object))},
		{"Cluster", "the cluster handle (jsapi.go handle)", keysOf(inst.handle(&entry{name: "x"}))},
		{"Result", "resultObject", keysOf(resultObject(rt, cluster.Result{}, nil))},
		{"Stats", "statsObject, drain's error included", keysOf(statsObject(rt, cluster.Stats{}, false, "gave up"))},
		{"WorkerStats", "cluster.WorkerStats", keysOf(structObject(rt, reflect.ValueOf(cluster.WorkerStats{})))},
		{"Hold", "cluster.Hold as holds() gives it", keysOf(structObject(rt, reflect.ValueOf(cluster.Hold{})))},
		{"Request", "parseRequest's keys", requestKeys},
		{"Trace", "the trace handle (trace.go traceObject)", keysOf(inst.traceObject(&traceData{}))},
		{"TraceOptions", "mocker.trace's option keys", traceKeys},
		{"PlayedRequest", "trace.play's request object", keysOf(inst.requestObject(replay.RequestEnd{}))},
		{"ClusterConfig", "cluster.ConfigFromMap's keys", validKeys(t, cfgErr)},
		{"PoolConfig", "a pool's keys", validKeys(t, poolErr)},
		{"TransportConfig", "transport's keys", validKeys(t, transportErr)},
		{"RouterOptions", "router_options' keys", validKeys(t, routerErr)},
		{"EngineArgs", "engine.ArgDocs", engineArgs},
		{"SGLangArgs", "engine.ArgDocs' sglang.* keys", sglangArgs},
		{"SummaryData", "xk6mocker.SummaryData", jsonNames(reflect.TypeFor[SummaryData]())},
		{"ClusterSummary", "xk6mocker.ClusterSummary", jsonNames(reflect.TypeFor[ClusterSummary]())},
		{"RequestCounts", "xk6mocker.RequestCounts", jsonNames(reflect.TypeFor[RequestCounts]())},
		{"HoldCounts", "xk6mocker.HoldCounts", jsonNames(reflect.TypeFor[HoldCounts]())},
		{"HoldDurations", "xk6mocker.HoldDurations", jsonNames(reflect.TypeFor[HoldDurations]())},
	}
	for _, tc := range interfaces {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := d.interfaces[tc.name]
			require.Truef(t, ok, "index.d.ts declares no interface %s", tc.name)
			require.NotEmpty(t, tc.want)
			for _, k := range tc.want {
				assert.Containsf(t, got, k, "%s has %q; index.d.ts's interface %s lacks it", tc.from, k, tc.name)
			}
			for _, k := range got {
				assert.Containsf(t, tc.want, k, "index.d.ts's interface %s declares %q, which %s does not have", tc.name, k, tc.from)
			}
			seen := map[string]bool{}
			for _, k := range got {
				assert.Falsef(t, seen[k], "index.d.ts's interface %s declares %q twice", tc.name, k)
				seen[k] = true
			}
		})
	}
	t.Run("Result covers cluster.Result", func(t *testing.T) {
		for _, k := range jsonNames(reflect.TypeFor[cluster.Result]()) {
			assert.Containsf(t, d.interfaces["Result"], k, "cluster.Result has %q; the Result of index.d.ts (and resultObject) lacks it", k)
		}
	})
	t.Run("Stats covers cluster.Stats", func(t *testing.T) {
		for _, k := range jsonNames(reflect.TypeFor[cluster.Stats]()) {
			assert.Containsf(t, d.interfaces["Stats"], k, "cluster.Stats has %q; the Stats of index.d.ts lacks it", k)
		}
	})

	unions := []struct {
		name string
		want []string
	}{
		{"RouterMode", modes},
		{"Engine", []string{string(engine.EngineVLLM), string(engine.EngineSGLang), string(engine.EngineTRTLLM)}},
		{"Outcome", []string{cluster.OutcomeCompleted, cluster.OutcomeAborted, cluster.OutcomeRejected, cluster.OutcomeError}},
	}
	for _, tc := range unions {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, sorted(tc.want), sorted(d.unions[tc.name]), "the union %s of index.d.ts", tc.name)
		})
	}
	t.Run("exports", func(t *testing.T) {
		assert.Regexp(t, `export function cluster\(config\?: ClusterConfig\): Cluster;`, d.text, "the named export cluster")
		assert.Regexp(t, `export function trace\(data: string \| ArrayBuffer, options\?: TraceOptions\): Trace;`, d.text, "the named export trace")
		assert.Regexp(t, `export default mocker;`, d.text)
		assert.Regexp(t, `declare module '`+regexp.QuoteMeta(ImportPath)+`'`, d.text)
	})
}

// TestDTS_ParserReadsWhatItMust feeds the d.ts reader the shapes it must
// not misread, so a drift test that passes is not a reader that saw
// nothing.
func TestDTS_ParserReadsWhatItMust(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		want []string
	}{
		{"a: number; b?: string;", []string{"a: number", "b?: string"}},
		{"f(x: { y: number; z: string }): void; g: Promise<{ a: 1; b: 2 }>", []string{"f(x: { y: number; z: string }): void", "g: Promise<{ a: 1; b: 2 }>"}},
		{"\n  readonly name: string;\n", []string{"readonly name: string"}},
		{"cb: (r: Result) => void; n: number", []string{"cb: (r: Result) => void", "n: number"}},
	} {
		assert.Equal(t, tc.want, dtsSplit(tc.body), tc.body)
	}
	for _, tc := range []struct{ member, name string }{
		{"readonly speedup_ratio: number", "speedup_ratio"},
		{"generateAsync(request: Request): Promise<Result>", "generateAsync"},
		{"error?: string", "error"},
	} {
		m := dtsMember.FindStringSubmatch(tc.member)
		require.NotNil(t, m, tc.member)
		assert.Equal(t, tc.name, m[1])
	}
	body, err := dtsBody("a: { b: 1 }; } trailing")
	require.NoError(t, err)
	assert.Equal(t, "a: { b: 1 }; ", body)
	_, err = dtsBody("a: { b: 1 };")
	assert.Error(t, err)
}

// TestDTS_SampleScriptRuns runs the script the tsc-tagged tests type-check
// against index.d.ts, so the sample is a real script whose runtime checks
// of the shapes it reads pass.
func TestDTS_SampleScriptRuns(t *testing.T) {
	res := runScript(t, "types/typed.js", nil)
	require.Equal(t, 0, res.code, "stderr: %s\n%s", res.stderr, res.stdout)
	assert.Regexp(t, `^typed: \d+ requests, \d+ holds, p99 \S+\n$`, res.stdout, "handleSummary read data.mocker")
	require.Len(t, res.clusters, 1)
	assert.Equal(t, uint64(18), res.clusters[0].stats.Requests, "6 iterations of 3 requests")
}
