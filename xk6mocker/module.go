package xk6mocker

import (
	"errors"
	"fmt"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/internal/recent"
)

// ImportPath is the path scripts import the module by.
const ImportPath = "k6/x/mocker"

func init() {
	harness.Register(ImportPath, Module{})
}

// Module is the harness module behind "k6/x/mocker". The package's init
// registers it; it is exported for harnesses that register modules under
// another path.
type Module struct{}

// KeepsTime reports that the module keeps modeled time (harness.TimeKeeper):
// a script that imports it runs, by default, on the paced clock, which
// drives its in-process clusters.
func (Module) KeepsTime() bool { return true }

// Metric names, as thresholds refer to them.
const (
	MetricRequests         = "mocker_requests"
	MetricRequestsLost     = "mocker_requests_lost"
	MetricRequestFailed    = "mocker_request_failed"
	MetricTTFT             = "mocker_ttft"
	MetricITL              = "mocker_itl"
	MetricE2E              = "mocker_e2e"
	MetricKVPins           = "mocker_kv_pins"
	MetricKVPinDuration    = "mocker_kv_pin_duration"
	MetricKVAborts         = "mocker_kv_aborts"
	MetricKVTransfer       = "mocker_kv_transfer_duration"
	MetricDecodeWait       = "mocker_decode_wait"
	MetricKVHeldBlocks     = "mocker_kv_held_blocks"
	MetricPrefillRejection = "mocker_prefill_rejections"
	MetricClockLag         = "mocker_clock_lag"
)

// moduleMetrics are one test run's metric handles.
type moduleMetrics struct {
	requests, requestFailed    *metrics.Metric
	lost                       *metrics.Metric
	ttft, itl, e2e             *metrics.Metric
	pins, pinDuration, aborts  *metrics.Metric
	transfer, decodeWait, held *metrics.Metric
	prefillRejections, lag     *metrics.Metric
}

func registerMetrics(reg *metrics.Registry) (moduleMetrics, error) {
	var err error
	add := func(name string, t metrics.MetricType, vt metrics.ValueType) *metrics.Metric {
		if err != nil {
			return nil
		}
		var m *metrics.Metric
		if m, err = reg.Register(name, t, vt); err != nil {
			err = fmt.Errorf("registering %s: %w", name, err)
		}
		return m
	}
	mm := moduleMetrics{
		requests:          add(MetricRequests, metrics.Counter, metrics.Default),
		requestFailed:     add(MetricRequestFailed, metrics.Rate, metrics.Default),
		ttft:              add(MetricTTFT, metrics.Trend, metrics.Time),
		itl:               add(MetricITL, metrics.Trend, metrics.Time),
		e2e:               add(MetricE2E, metrics.Trend, metrics.Time),
		pins:              add(MetricKVPins, metrics.Counter, metrics.Default),
		pinDuration:       add(MetricKVPinDuration, metrics.Trend, metrics.Time),
		aborts:            add(MetricKVAborts, metrics.Counter, metrics.Default),
		transfer:          add(MetricKVTransfer, metrics.Trend, metrics.Time),
		decodeWait:        add(MetricDecodeWait, metrics.Trend, metrics.Time),
		held:              add(MetricKVHeldBlocks, metrics.Gauge, metrics.Default),
		prefillRejections: add(MetricPrefillRejection, metrics.Counter, metrics.Default),
		lag:               add(MetricClockLag, metrics.Trend, metrics.Time),
		lost:              add(MetricRequestsLost, metrics.Counter, metrics.Default),
	}
	return mm, err
}

// instance is one VU's view of the module.
type instance struct {
	vu     harness.VU
	rt     *sobek.Runtime
	run    *run
	m      moduleMetrics
	regErr error  // a script declared one of our metric names with another type
	calls  uint64 // requests this VU handed to stepped clusters
	// pauses keep each wall-clock cluster's modeled time still until the
	// VU next waits (see generateBlocking).
	pauses     map[*entry]cluster.Pause
	waitHooked bool
	tagSets    map[tagKey]metrics.Tags            // tagSet's cache
	recentTags recent.Eight[tagKey, metrics.Tags] // tagSet's last sets, looked at first
	blocking   blockingCall                       // generate's wait on a stepped cluster
	names      valueCache                         // results' outcome and worker strings
	handles    map[*sobek.Object]*entry           // the cluster handles this VU made, for trace.play
}

// blockingCall is what a VU's blocking generate on a stepped cluster
// waits with: the gate the result opens, and the callback that keeps the
// result and opens it, made once per VU.
type blockingCall struct {
	gate harness.Gate
	done func(cluster.Result)
	res  cluster.Result
}

// NewModuleInstance registers the module's metrics in the run's registry
// and binds the VU to the run's clusters.
func (Module) NewModuleInstance(vu harness.VU) harness.ModuleInstance {
	inst := &instance{vu: vu, rt: vu.Runtime(), run: runFor(vu)}
	inst.m, inst.regErr = registerMetrics(vu.Registry())
	return inst
}

// Exports gives the default export {cluster, trace}; both are also named
// exports.
func (inst *instance) Exports() harness.Exports {
	obj := inst.rt.NewObject()
	must(obj.Set("cluster", inst.jsClusterInInit))
	must(obj.Set("trace", inst.jsTrace))
	return harness.Exports{Default: obj}
}

// errClusterOutsideInit is thrown by mocker.cluster called from setup, an
// iteration or teardown. A cluster lives for the whole run (its workers,
// transfer servers and sockets are closed at the end of it), so one built
// per iteration would pile up without bound.
var errClusterOutsideInit = errors.New("mocker.cluster: call it in the init context (at the top level of the script), " +
	"not in setup, the default function or teardown: a cluster lives until the end of the run, " +
	"so building them as the test runs would pile them up; build every cluster the script needs up front")

// jsClusterInInit is mocker.cluster, refused outside the init context.
func (inst *instance) jsClusterInInit(call sobek.FunctionCall) sobek.Value {
	if !inst.vu.InInit() {
		throw(inst.rt, errClusterOutsideInit)
	}
	return inst.jsCluster(call)
}

// throw raises a JS Error carrying msg, the way the harness's own modules
// do, so scripts and exit messages read "Error: mocker.cluster: …".
func throw(rt *sobek.Runtime, err error) {
	panic(jsError(rt, err))
}

func jsError(rt *sobek.Runtime, err error) *sobek.Object {
	obj, cerr := rt.New(rt.Get("Error"), rt.ToValue(err.Error()))
	if cerr != nil {
		return rt.NewGoError(err)
	}
	return obj
}

// must panics on errors that only a broken runtime produces (setting a
// property on a fresh plain object).
func must(err error) {
	if err != nil {
		panic(err)
	}
}
