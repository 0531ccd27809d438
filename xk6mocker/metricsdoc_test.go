package xk6mocker

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/harness/metrics"
)

func TestMetricDocs_EveryRegisteredMetricHasExactlyOneEntry(t *testing.T) {
	t.Parallel()
	reg := metrics.NewRegistry()
	_, err := registerMetrics(reg)
	require.NoError(t, err)
	registered := map[string]*metrics.Metric{}
	for _, m := range reg.All() {
		registered[m.Name] = m
	}
	require.NotEmpty(t, registered)
	docs := map[string][]MetricDoc{}
	for _, d := range MetricDocs {
		docs[d.Name] = append(docs[d.Name], d)
	}
	for name, m := range registered {
		ds := docs[name]
		if !assert.Lenf(t, ds, 1, "metric %s is registered by the module; want exactly one entry in xk6mocker.MetricDocs (xk6mocker/metricsdoc.go), then run go generate ./cmd/mocker", name) {
			continue
		}
		assert.Equalf(t, m.Type, ds[0].Type, "%s: documented type", name)
		assert.Equalf(t, m.Contains, ds[0].Contains, "%s: documented value type", name)
	}
	for name := range docs {
		assert.Containsf(t, registered, name, "xk6mocker.MetricDocs documents %s, which the module does not register", name)
	}
}

func TestMetricDocs_EntriesAreComplete(t *testing.T) {
	t.Parallel()
	for _, d := range MetricDocs {
		assert.Truef(t, strings.HasPrefix(d.Name, "mocker_"), "%s: every metric of the module starts with mocker_", d.Name)
		assert.Truef(t, strings.HasSuffix(d.Meaning, "."), "%s: Meaning is a sentence: %q", d.Name, d.Meaning)
	}
}

// TestMetricDocs_TagsAreTheSamplesTags runs scripts that make every metric
// of the module push samples and holds each sample's tags to its entry:
// the tags the module adds are CommonTags plus the entry's Tags, exactly,
// with the documented values where an entry gives one.
func TestMetricDocs_TagsAreTheSamplesTags(t *testing.T) {
	documented := map[string]MetricDoc{}
	for _, d := range MetricDocs {
		documented[d.Name] = d
	}
	sampled := map[string]bool{}
	for _, tc := range []struct {
		script string
		env    map[string]string
	}{
		{"metrics.js", map[string]string{"ITERATIONS": "18"}},
		{"rejections.js", nil},
		{"interrupted.js", nil}, // drain counts its cut requests lost
	} {
		t.Run(tc.script, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out.ndjson")
			res := runScript(t, tc.script, tc.env, "json="+path)
			require.Equal(t, 0, res.code, "stderr: %s\n%s", res.stderr, res.stdout)
			pts := readPoints(t, path)
			// The harness's own tags (scenario, group…) are on its own
			// metrics too; what remains on a mocker_* sample is the module's.
			harnessTags := map[string]bool{}
			for name, ps := range pts {
				if strings.HasPrefix(name, "mocker_") {
					continue
				}
				for _, p := range ps {
					for k := range p.Data.Tags {
						harnessTags[k] = true
					}
				}
			}
			require.NotEmpty(t, harnessTags, "the harness's metrics have samples")
			for name, ps := range pts {
				if !strings.HasPrefix(name, "mocker_") {
					continue
				}
				d, ok := documented[name]
				if !assert.Truef(t, ok, "samples of %s, which has no entry in MetricDocs", name) {
					continue
				}
				sampled[name] = true
				want := map[string]string{}
				for _, k := range CommonTags {
					want[k] = ""
				}
				for _, tag := range d.Tags {
					k, v, _ := strings.Cut(tag, "=")
					want[k] = v
				}
				for _, p := range ps {
					// A documented tag without a value may carry any.
					got := map[string]string{}
					for k, v := range p.Data.Tags {
						if harnessTags[k] {
							continue
						}
						if wv, ok := want[k]; ok && wv == "" {
							v = ""
						}
						got[k] = v
					}
					if !assert.Equalf(t, want, got, "%s: tags the module adds (values where documented), against MetricDocs", name) {
						break
					}
				}
			}
		})
	}
	for _, d := range MetricDocs {
		assert.Truef(t, sampled[d.Name], "no script of this test made %s push a sample, so its tags went unchecked", d.Name)
	}
}
