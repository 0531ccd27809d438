package harness

import (
	"context"
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
	v.t.paceToSockets()
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
	t.paceToSockets()
	t.net.sseOnce.Do(func() { t.net.sse, t.net.sseErr = sse.NewShared(t.reg) })
	if t.net.sseErr != nil {
		panic(v.rt.NewGoError(t.net.sseErr))
	}
	named := sse.NewClient(httpVU{v}, t.net.sse).Exports()
	return ExportsFunc(func() Exports { return Exports{Named: named} })
}

// paceToSockets keeps a paced clock within a millisecond of the wall
// clock, as the distributed transport does: a script that waits on real
// servers reads their time from the wall clock, and a wait on a socket
// (see httpVU.Outside) must pass as the wall clock does.
func (t *testRun) paceToSockets() {
	if t.vclock != nil {
		t.vclock.SetPaceSlack(time.Millisecond)
	}
}

// httpVU is a VU as k6/http sees it.
type httpVU struct{ *vu }

func (h httpVU) Iteration() int64  { return h.iterInInstance }
func (h httpVU) Now() time.Time    { return h.t.clock.Now() }
func (h httpVU) Warn(msg string)   { h.t.logger.Warn(msg) }
func (h httpVU) OnRunEnd(f func()) { h.t.OnEnd(f) }

// Outside runs f, which waits on sockets, so that on a paced clock the
// wait passes as script time: the VU sleeps on the clock (its turn
// given up, the other VUs running, the paced clock moving with the wall
// clock) until f, on a goroutine of its own, is done. On the wall clock
// f simply runs.
func (h httpVU) Outside(f func()) {
	if h.t.vclock == nil || !h.t.vclock.Paced() {
		f()
		return
	}
	h.waiting()
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		f()
	}()
	h.t.clock.Sleep(ctx, outsideWaitLimit)
	<-done // f ends with the VU's context, should that end first
}

// outsideWaitLimit bounds one Outside sleep; f's end cuts it short.
const outsideWaitLimit = 24 * time.Hour

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
