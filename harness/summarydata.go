package harness

import "fmt"

// SummaryDataRun is implemented by the RunContext of every run. A plugin
// reaches it with a type assertion, as net/http's Flusher is reached from
// a ResponseWriter:
//
//	if sd, ok := vu.Run().(harness.SummaryDataRun); ok { sd.AddSummaryData("mine", f) }
type SummaryDataRun interface {
	// AddSummaryData adds a top-level key to this run's end-of-test data:
	// the object handleSummary receives and the --summary-export file hold
	// key: f(), next to k6's own keys, whose shape does not change. f is
	// called once, after teardown; its value must encode as JSON. A key of
	// k6's data (metrics, root_group, options, state, setup_data) or one
	// added before panics: like Register, it is a programming error.
	AddSummaryData(key string, f func() any)
}

type summaryDatum struct {
	key string
	f   func() any
}

// AddSummaryData implements SummaryDataRun.
func (t *testRun) AddSummaryData(key string, f func() any) {
	switch key {
	case "", "metrics", "root_group", "options", "state", "setup_data":
		panic(fmt.Sprintf("harness: summary data key %q is k6's", key))
	}
	t.endMu.Lock()
	defer t.endMu.Unlock()
	for _, d := range t.data {
		if d.key == key {
			panic(fmt.Sprintf("harness: summary data key %q added twice", key))
		}
	}
	t.data = append(t.data, summaryDatum{key, f})
}

// addSummaryData calls the plugins' data functions and adds their values
// to data, returning what it added.
func (t *testRun) addSummaryData(data map[string]any) map[string]any {
	t.endMu.Lock()
	list := append([]summaryDatum(nil), t.data...)
	t.endMu.Unlock()
	added := make(map[string]any, len(list))
	for _, d := range list {
		v := d.f()
		data[d.key] = v
		added[d.key] = v
	}
	return added
}
