package options

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/internal/jsonval"
)

// Executor names, as in k6.
const (
	ExecSharedIterations   = "shared-iterations"
	ExecPerVUIterations    = "per-vu-iterations"
	ExecConstantVUs        = "constant-vus"
	ExecRampingVUs         = "ramping-vus"
	ExecConstantArrival    = "constant-arrival-rate"
	ExecRampingArrivalRate = "ramping-arrival-rate"
)

const (
	defaultGracefulStop = 30 * time.Second
	defaultMaxDuration  = 10 * time.Minute
	defaultTimeUnit     = time.Second
)

// Stage is one step of a ramping executor: reach Target (VUs, or iterations
// per timeUnit for ramping-arrival-rate) linearly over Duration.
type Stage struct {
	Duration time.Duration
	Target   int64
}

// Scenario is one validated entry of options.scenarios (or the "default"
// scenario derived from the top-level shortcuts). Fields that do not apply
// to the executor are zero.
type Scenario struct {
	Name         string
	Executor     string
	StartTime    time.Duration
	GracefulStop time.Duration
	Exec         string
	Env          map[string]string
	Tags         map[string]string

	VUs         int64
	Iterations  int64
	MaxDuration time.Duration
	Duration    time.Duration

	StartVUs         int64
	Stages           []Stage
	GracefulRampDown time.Duration

	Rate            int64
	StartRate       int64
	TimeUnit        time.Duration
	PreAllocatedVUs int64
	MaxVUs          int64
}

// Options is the consolidated test configuration: the script's exported
// options with the CLI overrides applied.
type Options struct {
	Scenarios         []*Scenario // sorted by name
	Thresholds        map[string][]metrics.Threshold
	Tags              map[string]string
	SummaryTrendStats []string
	SummaryTimeUnit   string
	NoSetup           bool
	NoTeardown        bool
	SetupTimeout      time.Duration
	TeardownTimeout   time.Duration
	// MinIterationDuration is k6's minIterationDuration: an iteration that
	// ends sooner waits out the rest before the next one starts.
	MinIterationDuration time.Duration
	// RandomSeed seeds every VU's Math.random (each VU its own stream
	// from it); nil leaves the seed to the runner (the harness takes the
	// wall time, or 0 on a virtual clock).
	RandomSeed *int64

	// Raw is the options object as the script exported it, re-exposed to the
	// script as exec.test.options.
	Raw map[string]any
}

// Overrides are the CLI flags that take precedence over the script's
// options. Nil pointers mean "not given".
type Overrides struct {
	VUs               *int64
	Duration          *time.Duration
	Iterations        *int64
	SummaryTrendStats []string
	NoSetup           bool
	NoTeardown        bool
	RandomSeed        *int64
}

var scenarioNameRE = regexp.MustCompile(`^[0-9a-zA-Z_-]+$`)

type fieldReader struct {
	path string
	raw  map[string]json.RawMessage
	used map[string]bool
}

// Error is an invalid option. Its message names the offending field
// ("scenarios.a.duration: required"); the harness maps it to exit code
// 104 (invalid configuration), as k6 does.
type Error struct {
	Err error // what is wrong, field path first
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap gives access to the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

func configErr(format string, args ...any) *Error {
	return &Error{Err: fmt.Errorf(format, args...)}
}

func (f *fieldReader) has(key string) bool { _, ok := f.raw[key]; return ok }

func (f *fieldReader) dur(key string, def time.Duration) (time.Duration, error) {
	f.used[key] = true
	raw, ok := f.raw[key]
	if !ok || string(raw) == "null" {
		return def, nil
	}
	d, err := parseDuration(raw)
	if err != nil {
		return 0, configErr("%s.%s: %v", f.path, key, err)
	}
	if d < 0 {
		return 0, configErr("%s.%s: must not be negative, got %s", f.path, key, d)
	}
	return d, nil
}

func (f *fieldReader) int(key string, def int64) (int64, error) {
	f.used[key] = true
	raw, ok := f.raw[key]
	if !ok || string(raw) == "null" {
		return def, nil
	}
	// One reader for numbers from scripts and JSON across mocker, so the
	// message has one shape: "<field>: want an integer in [0, 2^53], got …".
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return 0, configErr("%s.%s: want an integer ≥ 0, got %s", f.path, key, raw)
	}
	n, err := jsonval.Int(f.path+"."+key, v, 0, 1<<53)
	if err != nil {
		return 0, configErr("%v", err)
	}
	return n, nil
}

func (f *fieldReader) str(key, def string) (string, error) {
	f.used[key] = true
	raw, ok := f.raw[key]
	if !ok || string(raw) == "null" {
		return def, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", configErr("%s.%s: want a string, got %s", f.path, key, raw)
	}
	return s, nil
}

func (f *fieldReader) strMap(key string) (map[string]string, error) {
	f.used[key] = true
	raw, ok := f.raw[key]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, configErr("%s.%s: want an object of strings, got %s", f.path, key, raw)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch v := v.(type) {
		case string:
			out[k] = v
		case float64, bool:
			out[k] = fmt.Sprint(v)
		default:
			return nil, configErr("%s.%s.%s: want a string value", f.path, key, k)
		}
	}
	return out, nil
}

func (f *fieldReader) stages(key string) ([]Stage, error) {
	f.used[key] = true
	raw, ok := f.raw[key]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, configErr("%s.%s: want an array of {duration, target}, got %s", f.path, key, raw)
	}
	out := make([]Stage, 0, len(list))
	for i, st := range list {
		sr := &fieldReader{path: fmt.Sprintf("%s.%s[%d]", f.path, key, i), raw: st, used: map[string]bool{}}
		if !sr.has("duration") {
			return nil, configErr("%s.duration: required", sr.path)
		}
		if !sr.has("target") {
			return nil, configErr("%s.target: required", sr.path)
		}
		d, err := sr.dur("duration", 0)
		if err != nil {
			return nil, err
		}
		t, err := sr.int("target", 0)
		if err != nil {
			return nil, err
		}
		if err := sr.unknown(); err != nil {
			return nil, err
		}
		out = append(out, Stage{Duration: d, Target: t})
	}
	return out, nil
}

func (f *fieldReader) unknown() error {
	keys := make([]string, 0, len(f.raw))
	for k := range f.raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !f.used[k] {
			return configErr("%s.%s: unknown field", f.path, k)
		}
	}
	return nil
}

// maxDurationMs is the largest duration, in milliseconds, a time.Duration
// holds.
const maxDurationMs = float64(math.MaxInt64 / int64(time.Millisecond))

// parseDuration accepts k6's forms: a Go duration string ("1m30s") or a
// number of milliseconds.
func parseDuration(raw json.RawMessage) (time.Duration, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return d, nil
	}
	var ms float64
	if err := json.Unmarshal(raw, &ms); err != nil {
		return 0, fmt.Errorf("invalid duration %s", raw)
	}
	if math.Abs(ms) > maxDurationMs {
		return 0, fmt.Errorf("duration %s ms is out of range", raw)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

var executorFields = map[string][]string{
	ExecSharedIterations:   {"vus", "iterations", "maxDuration"},
	ExecPerVUIterations:    {"vus", "iterations", "maxDuration"},
	ExecConstantVUs:        {"vus", "duration"},
	ExecRampingVUs:         {"startVUs", "stages", "gracefulRampDown"},
	ExecConstantArrival:    {"rate", "timeUnit", "duration", "preAllocatedVUs", "maxVUs"},
	ExecRampingArrivalRate: {"startRate", "timeUnit", "stages", "preAllocatedVUs", "maxVUs"},
}

func parseScenario(name string, raw json.RawMessage) (*Scenario, error) {
	path := "scenarios." + name
	if !scenarioNameRE.MatchString(name) {
		return nil, configErr("%s: scenario names may contain only letters, digits, '_' and '-'", path)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, configErr("%s: want an object, got %s", path, raw)
	}
	f := &fieldReader{path: path, raw: fields, used: map[string]bool{"options": true}}
	sc := &Scenario{Name: name}
	var err error
	if sc.Executor, err = f.str("executor", ""); err != nil {
		return nil, err
	}
	if sc.Executor == "" {
		return nil, configErr("%s.executor: required (one of %s)", path, executorList())
	}
	if _, ok := executorFields[sc.Executor]; !ok {
		return nil, configErr("%s.executor: unknown executor %q (valid: %s)", path, sc.Executor, executorList())
	}
	if sc.StartTime, err = f.dur("startTime", 0); err != nil {
		return nil, err
	}
	if sc.GracefulStop, err = f.dur("gracefulStop", defaultGracefulStop); err != nil {
		return nil, err
	}
	if sc.Exec, err = f.str("exec", "default"); err != nil {
		return nil, err
	}
	if sc.Exec == "" {
		return nil, configErr("%s.exec: must not be empty", path)
	}
	if sc.Env, err = f.strMap("env"); err != nil {
		return nil, err
	}
	if sc.Tags, err = f.strMap("tags"); err != nil {
		return nil, err
	}
	for _, k := range executorFields[sc.Executor] {
		f.used[k] = true
	}
	if err := f.unknown(); err != nil {
		return nil, fmt.Errorf("%w (executor %s accepts: %s)", err, sc.Executor, strings.Join(executorFields[sc.Executor], ", "))
	}
	if err := sc.readExecutorFields(f); err != nil {
		return nil, err
	}
	return sc, nil
}

func executorList() string {
	names := make([]string, 0, len(executorFields))
	for k := range executorFields {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func (sc *Scenario) readExecutorFields(f *fieldReader) error {
	var err error
	p := f.path
	switch sc.Executor {
	case ExecSharedIterations, ExecPerVUIterations:
		if sc.VUs, err = f.int("vus", 1); err != nil {
			return err
		}
		if sc.Iterations, err = f.int("iterations", 1); err != nil {
			return err
		}
		if sc.MaxDuration, err = f.dur("maxDuration", defaultMaxDuration); err != nil {
			return err
		}
		if sc.VUs < 1 {
			return configErr("%s.vus: must be at least 1", p)
		}
		if sc.Iterations < 1 {
			return configErr("%s.iterations: must be at least 1", p)
		}
		if sc.Executor == ExecSharedIterations && sc.Iterations < sc.VUs {
			return configErr("%s.iterations: must be at least vus (%d), got %d", p, sc.VUs, sc.Iterations)
		}
		if sc.MaxDuration <= 0 {
			return configErr("%s.maxDuration: must be positive", p)
		}
	case ExecConstantVUs:
		if sc.VUs, err = f.int("vus", 1); err != nil {
			return err
		}
		if !f.has("duration") {
			return configErr("%s.duration: required", p)
		}
		if sc.Duration, err = f.dur("duration", 0); err != nil {
			return err
		}
		if sc.VUs < 1 {
			return configErr("%s.vus: must be at least 1", p)
		}
		if sc.Duration <= 0 {
			return configErr("%s.duration: must be positive", p)
		}
	case ExecRampingVUs:
		if sc.StartVUs, err = f.int("startVUs", 1); err != nil {
			return err
		}
		if sc.GracefulRampDown, err = f.dur("gracefulRampDown", defaultGracefulStop); err != nil {
			return err
		}
		if sc.Stages, err = f.stages("stages"); err != nil {
			return err
		}
		if len(sc.Stages) == 0 {
			return configErr("%s.stages: at least one stage is required", p)
		}
		if sc.StartVUs == 0 && MaxTarget(sc.Stages) == 0 {
			return configErr("%s.stages: startVUs or some stage target must be above 0", p)
		}
	case ExecConstantArrival, ExecRampingArrivalRate:
		if sc.TimeUnit, err = f.dur("timeUnit", defaultTimeUnit); err != nil {
			return err
		}
		if sc.TimeUnit <= 0 {
			return configErr("%s.timeUnit: must be positive", p)
		}
		if !f.has("preAllocatedVUs") {
			return configErr("%s.preAllocatedVUs: required", p)
		}
		if sc.PreAllocatedVUs, err = f.int("preAllocatedVUs", 0); err != nil {
			return err
		}
		if sc.MaxVUs, err = f.int("maxVUs", sc.PreAllocatedVUs); err != nil {
			return err
		}
		if sc.MaxVUs < sc.PreAllocatedVUs {
			return configErr("%s.maxVUs: must be at least preAllocatedVUs (%d), got %d", p, sc.PreAllocatedVUs, sc.MaxVUs)
		}
		if sc.MaxVUs == 0 {
			return configErr("%s.maxVUs: must be at least 1", p)
		}
		if sc.Executor == ExecConstantArrival {
			if !f.has("rate") {
				return configErr("%s.rate: required", p)
			}
			if sc.Rate, err = f.int("rate", 0); err != nil {
				return err
			}
			if sc.Rate <= 0 {
				return configErr("%s.rate: must be positive", p)
			}
			if !f.has("duration") {
				return configErr("%s.duration: required", p)
			}
			if sc.Duration, err = f.dur("duration", 0); err != nil {
				return err
			}
			if sc.Duration <= 0 {
				return configErr("%s.duration: must be positive", p)
			}
		} else {
			if sc.StartRate, err = f.int("startRate", 0); err != nil {
				return err
			}
			if sc.Stages, err = f.stages("stages"); err != nil {
				return err
			}
			if len(sc.Stages) == 0 {
				return configErr("%s.stages: at least one stage is required", p)
			}
		}
	}
	return nil
}

// MaxTarget is the highest target of the stages (0 for none).
func MaxTarget(stages []Stage) int64 {
	var m int64
	for _, s := range stages {
		m = max(m, s.Target)
	}
	return m
}

// Parse validates the script's exported options (as JSON) and applies the
// CLI overrides. Every error is an *Error (possibly wrapped) whose message
// names the offending field.
func Parse(raw []byte, ov Overrides) (*Options, error) {
	top := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &top); err != nil {
			return nil, configErr("options: want an object: %v", err)
		}
	}
	opts := &Options{SetupTimeout: 60 * time.Second, TeardownTimeout: 60 * time.Second}
	if err := json.Unmarshal(orNull(raw), &opts.Raw); err != nil {
		opts.Raw = nil
	}
	f := &fieldReader{path: "options", raw: top, used: map[string]bool{}}
	var err error
	if opts.Tags, err = f.strMap("tags"); err != nil {
		return nil, err
	}
	if opts.MinIterationDuration, err = f.dur("minIterationDuration", 0); err != nil {
		return nil, err
	}
	if opts.SetupTimeout, err = f.dur("setupTimeout", opts.SetupTimeout); err != nil {
		return nil, err
	}
	if opts.TeardownTimeout, err = f.dur("teardownTimeout", opts.TeardownTimeout); err != nil {
		return nil, err
	}
	for _, key := range []string{"noSetup", "noTeardown"} {
		if r, ok := top[key]; ok {
			var b bool
			if err := json.Unmarshal(r, &b); err != nil {
				return nil, configErr("options.%s: want a boolean, got %s", key, r)
			}
			if key == "noSetup" {
				opts.NoSetup = b
			} else {
				opts.NoTeardown = b
			}
		}
	}
	opts.NoSetup = opts.NoSetup || ov.NoSetup
	if f.has("randomSeed") {
		seed, err := f.int("randomSeed", 0)
		if err != nil {
			return nil, err
		}
		opts.RandomSeed = &seed
	}
	if ov.RandomSeed != nil {
		opts.RandomSeed = ov.RandomSeed
	}
	opts.NoTeardown = opts.NoTeardown || ov.NoTeardown

	opts.SummaryTrendStats = append([]string(nil), metrics.DefaultTrendStats...)
	if r, ok := top["summaryTrendStats"]; ok && string(r) != "null" {
		var stats []string // a fresh slice: never decode into the shared default
		if err := json.Unmarshal(r, &stats); err != nil {
			return nil, configErr("options.summaryTrendStats: want an array of strings, got %s", r)
		}
		opts.SummaryTrendStats = stats
	}
	if len(ov.SummaryTrendStats) > 0 {
		opts.SummaryTrendStats = ov.SummaryTrendStats
	}
	if err := metrics.ValidateTrendStats(opts.SummaryTrendStats); err != nil {
		return nil, configErr("options.summaryTrendStats: %v", err)
	}
	if opts.SummaryTimeUnit, err = f.str("summaryTimeUnit", ""); err != nil {
		return nil, err
	}
	if opts.SummaryTimeUnit != "" {
		if err := metrics.ValidateTimeUnit(opts.SummaryTimeUnit); err != nil {
			return nil, configErr("options.summaryTimeUnit: %v", err)
		}
	}

	if opts.Thresholds, err = parseThresholdConfig(top["thresholds"]); err != nil {
		return nil, err
	}
	if opts.Scenarios, err = consolidateScenarios(f, top, ov); err != nil {
		return nil, err
	}
	return opts, nil
}

func orNull(raw []byte) []byte {
	if len(bytes.TrimSpace(raw)) == 0 {
		return []byte("null")
	}
	return raw
}

func parseThresholdConfig(raw json.RawMessage) (map[string][]metrics.Threshold, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var byKey map[string]json.RawMessage
	if err := json.Unmarshal(raw, &byKey); err != nil {
		return nil, configErr("options.thresholds: want an object, got %s", raw)
	}
	out := make(map[string][]metrics.Threshold, len(byKey))
	for key, r := range byKey {
		path := fmt.Sprintf("options.thresholds[%q]", key)
		var items []json.RawMessage
		if err := json.Unmarshal(r, &items); err != nil {
			items = []json.RawMessage{r}
		}
		list := make([]metrics.Threshold, 0, len(items))
		for i, it := range items {
			var src string
			if err := json.Unmarshal(it, &src); err == nil {
				list = append(list, metrics.Threshold{Source: src})
				continue
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(it, &obj); err != nil {
				return nil, configErr("%s[%d]: want a string or {threshold, abortOnFail, delayAbortEval}, got %s", path, i, it)
			}
			fr := &fieldReader{path: fmt.Sprintf("%s[%d]", path, i), raw: obj, used: map[string]bool{}}
			var th metrics.Threshold
			var err error
			if th.Source, err = fr.str("threshold", ""); err != nil {
				return nil, err
			}
			if th.Source == "" {
				return nil, configErr("%s.threshold: required", fr.path)
			}
			if th.DelayAbortEval, err = fr.dur("delayAbortEval", 0); err != nil {
				return nil, err
			}
			fr.used["abortOnFail"] = true
			if a, ok := obj["abortOnFail"]; ok {
				if err := json.Unmarshal(a, &th.AbortOnFail); err != nil {
					return nil, configErr("%s.abortOnFail: want a boolean, got %s", fr.path, a)
				}
			}
			if err := fr.unknown(); err != nil {
				return nil, err
			}
			list = append(list, th)
		}
		out[key] = list
	}
	return out, nil
}

// consolidateScenarios applies k6's rules: CLI shortcuts (-u, -d, -i)
// replace the script's execution config; otherwise explicit scenarios win;
// otherwise the top-level shortcuts become a scenario named "default".
func consolidateScenarios(f *fieldReader, top map[string]json.RawMessage, ov Overrides) ([]*Scenario, error) {
	var (
		vus, iterations   *int64
		duration          *time.Duration
		stages            []Stage
		err               error
		haveDur, haveIter bool
	)
	readInt := func(key string) (*int64, error) {
		if !f.has(key) || string(f.raw[key]) == "null" {
			return nil, nil
		}
		v, err := f.int(key, 0)
		return &v, err
	}
	if vus, err = readInt("vus"); err != nil {
		return nil, err
	}
	if iterations, err = readInt("iterations"); err != nil {
		return nil, err
	}
	if f.has("duration") && string(f.raw["duration"]) != "null" {
		d, err := f.dur("duration", 0)
		if err != nil {
			return nil, err
		}
		duration = &d
	}
	if stages, err = f.stages("stages"); err != nil {
		return nil, err
	}
	cliShortcut := ov.Duration != nil || ov.Iterations != nil
	if ov.VUs != nil {
		vus = ov.VUs
	}
	if cliShortcut {
		// k6: execution shortcuts given on the command line replace the
		// script's scenarios and shortcuts entirely.
		stages, duration, iterations = nil, ov.Duration, ov.Iterations
	}
	haveDur, haveIter = duration != nil, iterations != nil

	rawScenarios, hasScenarios := top["scenarios"]
	if hasScenarios && string(rawScenarios) != "null" && !cliShortcut {
		if haveDur || haveIter || len(stages) > 0 {
			return nil, configErr("options: the shortcuts duration, iterations and stages cannot be combined with scenarios")
		}
		var byName map[string]json.RawMessage
		if err := json.Unmarshal(rawScenarios, &byName); err != nil {
			return nil, configErr("options.scenarios: want an object, got %s", rawScenarios)
		}
		if len(byName) == 0 {
			return nil, configErr("options.scenarios: at least one scenario is required")
		}
		names := make([]string, 0, len(byName))
		for n := range byName {
			names = append(names, n)
		}
		sort.Strings(names)
		out := make([]*Scenario, 0, len(names))
		for _, n := range names {
			sc, err := parseScenario(n, byName[n])
			if err != nil {
				return nil, err
			}
			out = append(out, sc)
		}
		return out, nil
	}

	sc := &Scenario{Name: "default", Exec: "default", GracefulStop: defaultGracefulStop}
	v := int64(1)
	if vus != nil {
		v = *vus
	}
	switch {
	case haveIter && len(stages) > 0:
		return nil, configErr("options: iterations and stages cannot be combined")
	case haveDur && len(stages) > 0:
		return nil, configErr("options: duration and stages cannot be combined")
	case haveIter:
		sc.Executor, sc.VUs, sc.Iterations, sc.MaxDuration = ExecSharedIterations, v, *iterations, defaultMaxDuration
		if haveDur {
			sc.MaxDuration = *duration
		}
		if sc.VUs < 1 {
			return nil, configErr("options.vus: must be at least 1")
		}
		if sc.Iterations < sc.VUs {
			return nil, configErr("options.iterations: must be at least vus (%d), got %d", sc.VUs, sc.Iterations)
		}
		if sc.MaxDuration <= 0 {
			return nil, configErr("options.duration: must be positive")
		}
	case haveDur:
		if *duration <= 0 {
			return nil, configErr("options.duration: must be positive, got %s", *duration)
		}
		if v < 1 {
			return nil, configErr("options.vus: must be at least 1")
		}
		sc.Executor, sc.VUs, sc.Duration = ExecConstantVUs, v, *duration
	case len(stages) > 0:
		sc.Executor, sc.StartVUs, sc.Stages, sc.GracefulRampDown = ExecRampingVUs, v, stages, defaultGracefulStop
		if sc.StartVUs == 0 && MaxTarget(stages) == 0 {
			return nil, configErr("options.stages: vus or some stage target must be above 0")
		}
	case vus != nil:
		if v < 1 {
			return nil, configErr("options.vus: must be at least 1")
		}
		sc.Executor, sc.VUs, sc.Iterations, sc.MaxDuration = ExecSharedIterations, v, v, defaultMaxDuration
	default:
		sc.Executor, sc.VUs, sc.Iterations, sc.MaxDuration = ExecPerVUIterations, 1, 1, defaultMaxDuration
	}
	return []*Scenario{sc}, nil
}

// PeakVUs is the number of VUs the scenario may need at once.
func (sc *Scenario) PeakVUs() int64 {
	switch sc.Executor {
	case ExecRampingVUs:
		return max(sc.StartVUs, MaxTarget(sc.Stages))
	case ExecConstantArrival, ExecRampingArrivalRate:
		return sc.MaxVUs
	}
	return sc.VUs
}

// InitialVUs is the number of VUs initialised before the test starts; the
// arrival-rate executors add the rest up to maxVUs on demand.
func (sc *Scenario) InitialVUs() int64 {
	if sc.Executor == ExecConstantArrival || sc.Executor == ExecRampingArrivalRate {
		return sc.PreAllocatedVUs
	}
	return sc.PeakVUs()
}

// PlannedIterations is the number of iterations an iteration executor
// is to run; 0 for the executors that run for a duration.
func (sc *Scenario) PlannedIterations() int64 {
	switch sc.Executor {
	case ExecSharedIterations:
		return sc.Iterations
	case ExecPerVUIterations:
		return sc.Iterations * sc.VUs
	}
	return 0
}

// TotalDuration is the scenario's regular duration (without gracefulStop).
func (sc *Scenario) TotalDuration() time.Duration {
	switch sc.Executor {
	case ExecSharedIterations, ExecPerVUIterations:
		return sc.MaxDuration
	case ExecRampingVUs, ExecRampingArrivalRate:
		var d time.Duration
		for _, s := range sc.Stages {
			d += s.Duration
		}
		return d
	}
	return sc.Duration
}

// k6Options are the top-level option keys k6 knows. Keys outside this set
// are most likely typos (e.g. "threshold"); they are ignored with a
// warning, as k6 does.
var k6Options = map[string]bool{
	"vus": true, "duration": true, "iterations": true, "stages": true, "scenarios": true,
	"thresholds": true, "tags": true, "systemTags": true, "summaryTrendStats": true,
	"summaryTimeUnit": true, "setupTimeout": true, "teardownTimeout": true, "noSetup": true,
	"noTeardown": true, "minIterationDuration": true, "throw": true, "paused": true,
	"executionSegment": true, "executionSegmentSequence": true, "rps": true, "dns": true,
	"maxRedirects": true, "userAgent": true, "batch": true, "batchPerHost": true,
	"httpDebug": true, "insecureSkipTLSVerify": true, "tlsCipherSuites": true,
	"tlsVersion": true, "tlsAuth": true, "blacklistIPs": true, "blockHostnames": true,
	"hosts": true, "noConnectionReuse": true, "noVUConnectionReuse": true, "ext": true,
	"cloud": true, "noCookiesReset": true, "discardResponseBodies": true,
	"consoleOutput": true, "localIPs": true, "metricSamplesBufferSize": true,
	"noUsageReport": true, "maxVUs": true, "linger": true,
	// ours: seeds Math.random (k6 has no such option)
	"randomSeed": true,
}

// Known reports whether key is a top-level option k6 knows.
func Known(key string) bool { return k6Options[key] }

// UnknownKeys returns the sorted top-level keys of the exported options
// (raw JSON) that are not k6 options.
func UnknownKeys(raw []byte) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return nil
	}
	var out []string
	for k := range top {
		if !k6Options[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// ConsolidatedJSON renders the options as exec.test.options shows them: the
// script's options with the consolidated scenarios (also for scripts that
// only used the vus/duration/iterations/stages shortcuts or CLI flags) and
// the effective summary settings.
func (o *Options) ConsolidatedJSON() string {
	out := map[string]any{}
	for k, v := range o.Raw {
		out[k] = v
	}
	scs := make(map[string]any, len(o.Scenarios))
	for _, sc := range o.Scenarios {
		scs[sc.Name] = sc.jsonMap()
	}
	out["scenarios"] = scs
	out["summaryTrendStats"] = o.SummaryTrendStats
	out["setupTimeout"] = o.SetupTimeout.String()
	out["teardownTimeout"] = o.TeardownTimeout.String()
	b, err := json.Marshal(out)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// jsonMap is the scenario in k6's options shape, durations as Go duration
// strings (as k6 prints them).
func (sc *Scenario) jsonMap() map[string]any {
	m := map[string]any{
		"executor":     sc.Executor,
		"startTime":    sc.StartTime.String(),
		"gracefulStop": sc.GracefulStop.String(),
		"exec":         sc.Exec,
	}
	if len(sc.Env) > 0 {
		m["env"] = sc.Env
	}
	if len(sc.Tags) > 0 {
		m["tags"] = sc.Tags
	}
	stages := func() []map[string]any {
		out := make([]map[string]any, len(sc.Stages))
		for i, st := range sc.Stages {
			out[i] = map[string]any{"duration": st.Duration.String(), "target": st.Target}
		}
		return out
	}
	switch sc.Executor {
	case ExecSharedIterations, ExecPerVUIterations:
		m["vus"], m["iterations"], m["maxDuration"] = sc.VUs, sc.Iterations, sc.MaxDuration.String()
	case ExecConstantVUs:
		m["vus"], m["duration"] = sc.VUs, sc.Duration.String()
	case ExecRampingVUs:
		m["startVUs"], m["stages"], m["gracefulRampDown"] = sc.StartVUs, stages(), sc.GracefulRampDown.String()
	case ExecConstantArrival:
		m["rate"], m["timeUnit"], m["duration"] = sc.Rate, sc.TimeUnit.String(), sc.Duration.String()
		m["preAllocatedVUs"], m["maxVUs"] = sc.PreAllocatedVUs, sc.MaxVUs
	case ExecRampingArrivalRate:
		m["startRate"], m["timeUnit"], m["stages"] = sc.StartRate, sc.TimeUnit.String(), stages()
		m["preAllocatedVUs"], m["maxVUs"] = sc.PreAllocatedVUs, sc.MaxVUs
	}
	return m
}
