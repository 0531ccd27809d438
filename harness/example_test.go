package harness_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness"
	"github.com/kvstrand/mocker/harness/metrics"
)

// greeter is a tiny plugin: greet(name) returns a string and counts the
// greetings in a custom metric; later(v) returns a Promise settled from
// another goroutine through the VU's event loop.
type greeter struct{}

func (greeter) NewModuleInstance(vu harness.VU) harness.ModuleInstance {
	greetings, err := vu.Registry().Register("greetings", metrics.Counter, metrics.Default)
	if err != nil {
		panic(err)
	}
	rt := vu.Runtime()
	return harness.ExportsFunc(func() harness.Exports {
		return harness.Exports{Named: map[string]any{
			"greet": func(name string) string {
				vu.Push(greetings, 1, map[string]string{"who": name})
				return "hello, " + name
			},
			"later": func(v sobek.Value) *sobek.Promise {
				p, resolve, _ := rt.NewPromise()
				done := vu.RegisterCallback()
				go func() { done(func() error { return resolve(v) }) }()
				return p
			},
		}}
	})
}

var registerGreeter sync.Once

func Example() {
	// Plugins usually register from an init function; Once keeps this
	// example repeatable under go test -count.
	registerGreeter.Do(func() { harness.Register("k6/x/greeter", greeter{}) })

	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "script.js")
	_ = os.WriteFile(script, []byte(`
import { greet, later } from 'k6/x/greeter';
export const options = { vus: 2, iterations: 4, thresholds: { 'greetings{who:world}': ['count==4'] } };
export default async function () {
  const name = await later('world');
  greet(name);
}
export function handleSummary(data) {
  return { stdout: 'greetings: ' + data.metrics.greetings.values.count + '\n' };
}
`), 0o644)

	err := harness.Run(context.Background(), harness.Config{Script: script, Quiet: true})
	fmt.Println("exit code:", harness.ExitCode(err))
	// Output:
	// greetings: 4
	// exit code: 0
}
