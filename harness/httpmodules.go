package harness

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/kvstrand/mocker/harness/k6http"
	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/harness/sse"
)

// networkModules are the built-in modules that talk to real servers over
// sockets. A virtual clock cannot model the time a socket takes, so a run
// on it refuses them at init (see refuseOnVirtualClock).
var networkModules = map[string]bool{"k6/http": true, "k6/x/sse": true, "k6/experimental/sse": true}

// VirtualClockRefusal is the error of a run on the virtual clock whose
// script imports a module that waits on real sockets (exit code 104).
type VirtualClockRefusal struct{ module string }

func (e *VirtualClockRefusal) Error() string {
	return fmt.Sprintf("module %q cannot run on the virtual clock: it waits on real sockets, whose time a virtual clock cannot model; run with --clock wall (or the paced clock) to use it", e.module)
}

// refuseOnVirtualClock is the loader's check of an import specifier.
func (t *testRun) refuseOnVirtualClock(specifier string) error {
	if networkModules[specifier] && t.cfg.clock == nil && t.cfg.Clock == ClockVirtual {
		return &VirtualClockRefusal{module: specifier}
	}
	return nil
}

// netModules is a run's state for the network modules, made when a
// script first imports one.
type netModules struct {
	once sync.Once
	http *k6http.Shared
	err  error

	sseOnce sync.Once
	sse     *sse.Shared
	sseErr  error
}

func (t *testRun) httpShared() (*k6http.Shared, error) {
	t.net.once.Do(func() {
		t.net.http, t.net.err = k6http.NewShared(t.reg, func() (k6http.Options, error) {
			if t.opts == nil {
				return k6http.Options{}, fmt.Errorf("k6/http: the options are not read yet")
			}
			return k6http.ParseOptions(t.opts.Raw)
		})
	})
	return t.net.http, t.net.err
}

func newHTTPModule(h VU) ModuleInstance {
	v := h.(*vu)
	sh, err := v.t.httpShared()
	if err != nil {
		panic(v.rt.NewGoError(err))
	}
	named := k6http.NewClient(httpVU{v}, sh).Exports()
	return ExportsFunc(func() Exports { return Exports{Named: named} })
}

func newSSEModule(h VU) ModuleInstance {
	v := h.(*vu)
	t := v.t
	t.net.sseOnce.Do(func() { t.net.sse, t.net.sseErr = sse.NewShared(t.reg) })
	if t.net.sseErr != nil {
		panic(v.rt.NewGoError(t.net.sseErr))
	}
	named := sse.NewClient(httpVU{v}, t.net.sse).Exports()
	return ExportsFunc(func() Exports { return Exports{Named: named} })
}

// httpVU is a VU as k6/http sees it.
type httpVU struct{ *vu }

func (h httpVU) Iteration() int64  { return h.iterInInstance }
func (h httpVU) Now() time.Time    { return h.t.clock.Now() }
func (h httpVU) Warn(msg string)   { h.t.logger.Warn(msg) }
func (h httpVU) OnRunEnd(f func()) { h.t.OnEnd(f) }

func (h httpVU) Emit(samples []metrics.Sample) {
	if h.inInit || h.ctx.Err() != nil {
		return
	}
	h.t.push(samples...)
}

// loadError is err, unless the script failed to load because it imports
// a module the run refuses: that is a configuration error (exit 104).
func (t *testRun) loadError(err error) error {
	if refused := t.loader.refusal(); refused != nil {
		return &ExitError{Code: ExitInvalidConfig, Err: refused}
	}
	return err
}

// expectedResponseKey is the submetric k6 always tracks, and shows in the
// end summary, for scripts that make HTTP requests.
const expectedResponseKey = "http_req_duration{expected_response:true}"

// thresholdsWithHTTP are the script's thresholds, plus the
// expected-response submetric (with no threshold) when the script
// imports k6/http, so that the summary shows it as k6's does.
func (t *testRun) thresholdsWithHTTP() map[string][]metrics.Threshold {
	if t.net.http == nil {
		return t.opts.Thresholds
	}
	for k := range t.opts.Thresholds {
		if strings.ReplaceAll(k, " ", "") == expectedResponseKey {
			return t.opts.Thresholds
		}
	}
	out := make(map[string][]metrics.Threshold, len(t.opts.Thresholds)+1)
	maps.Copy(out, t.opts.Thresholds)
	out[expectedResponseKey] = nil
	return out
}
