package harness_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness"
	"github.com/kvstrand/mocker/harness/metrics"
)

// greeter is a tiny plugin: greet(name) returns a string and counts the
// greetings in a custom metric; later(v) returns a Promise settled from
// another goroutine through the VU's event loop. Per run it keeps a
// guest book that the run's summary section prints and that is closed when
// the run ends.
type greeter struct{}

type guestBook struct {
	mu     sync.Mutex
	names  map[string]int
	closed bool
}

var (
	booksMu sync.Mutex
	books   = map[uint64]*guestBook{} // by run ID
)

// bookFor returns the run's guest book, creating it (with its summary
// section and end hook) for the run's first VU.
func bookFor(run harness.RunContext) *guestBook {
	booksMu.Lock()
	defer booksMu.Unlock()
	if b, ok := books[run.ID()]; ok {
		return b
	}
	b := &guestBook{names: map[string]int{}}
	books[run.ID()] = b
	run.AddSummarySection(func(w io.Writer) {
		b.mu.Lock()
		defer b.mu.Unlock()
		fmt.Fprintf(w, "guest book: %d greetings of world\n", b.names["world"])
	})
	run.OnEnd(func() {
		booksMu.Lock()
		delete(books, run.ID())
		booksMu.Unlock()
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		fmt.Println("guest book closed")
	})
	return b
}

func (greeter) NewModuleInstance(vu harness.VU) harness.ModuleInstance {
	greetings, err := vu.Registry().Register("greetings", metrics.Counter, metrics.Default)
	if err != nil {
		panic(err)
	}
	book := bookFor(vu.Run())
	rt := vu.Runtime()
	return harness.ExportsFunc(func() harness.Exports {
		return harness.Exports{Named: map[string]any{
			"greet": func(name string) string {
				vu.Push(greetings, 1, map[string]string{"who": name})
				book.mu.Lock()
				book.names[name]++
				book.mu.Unlock()
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
`), 0o644)

	var summary bytes.Buffer
	err := harness.Run(context.Background(), harness.Config{Script: script, Quiet: true, NoColor: true, Stdout: &summary})
	fmt.Println("threshold passed:", strings.Contains(summary.String(), "✓ 'count==4'"))
	_, book, _ := strings.Cut(summary.String(), "guest book")
	fmt.Print("guest book" + book)
	fmt.Println("exit code:", harness.ExitCode(err))
	// Output:
	// guest book closed
	// threshold passed: true
	// guest book: 4 greetings of world
	// exit code: 0
}
