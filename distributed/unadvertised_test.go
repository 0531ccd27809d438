package distributed

import (
	"encoding/json"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/handoff"
)

// TestPlane_ConnectToAnUnadvertisedAddressIsRefused: a connect on an
// authenticated session (its MAC verifies: the router's key in the wrong
// hands) whose params name a host:port no registered prefill advertised
// is refused, counted in the worker's rejections (mocker_plane_rejected_total
// at the router) and answered with an error, and the address is never
// dialed; a connect to the registered prefill's address is dialed.
func TestPlane_ConnectToAnUnadvertisedAddressIsRefused(t *testing.T) {
	t.Parallel()
	const ns = "unadvertised"
	ls := services(t)
	router := newTestRouter(t, ls, ns)
	startWorkers(t, ls, ns,
		worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: []byte(`{"speedup_ratio": 10}`)},
		worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: []byte(`{"speedup_ratio": 10}`)})
	ec := etcdClient(t, ls)
	var regs map[string]plane.Registration
	require.Eventually(t, func() bool { regs = registrations(t, ec, ns); return len(regs) == 2 }, 30*time.Second, 10*time.Millisecond)

	// The attacker's listener: nothing may dial it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var dials atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			_ = c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	d := driverFor(t, ls, regs["d0"], router)
	d.session = plane.NewSessionID()
	d.send(plane.Command{Op: plane.OpHello})
	connect := func(tid uint64, host string, port int) {
		raw, err := json.Marshal(bootstrap.VLLMParams{TransferID: tid, PrefillHost: host, PrefillPort: port, TransferToken: bootstrap.Token{1}})
		require.NoError(t, err)
		d.send(plane.Command{Op: plane.OpConnect, TID: tid, ID: tid, Params: raw})
	}
	// status waits for the decode's answer to transfer tid and returns it
	// with the worker's rejection count as of that frame.
	status := func(tid uint64) (*plane.WireStatus, uint64) {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case f := <-d.frames:
				for _, it := range f.Items {
					if it.Status != nil && it.Status.TID == tid {
						return it.Status, f.Rejected
					}
				}
			case <-timeout:
				t.Fatalf("no answer to the connect of transfer %d", tid)
				return nil, 0
			}
		}
	}

	connect(41, "127.0.0.1", port)
	st, rejected := status(41)
	assert.Equal(t, plane.StatusName(handoff.Error), st.Status)
	assert.Contains(t, st.Err, "no registered prefill worker advertises 127.0.0.1:")
	assert.EqualValues(t, 1, rejected, "the refusal is counted")

	// The prefill's own address is dialed: its server answers (the room
	// was never opened, so with an error), and nothing more is counted.
	host, p, err := net.SplitHostPort(regs["p0"].TransferAddr)
	require.NoError(t, err)
	pport, err := strconv.Atoi(p)
	require.NoError(t, err)
	connect(42, host, pport)
	st, rejected = status(42)
	assert.Equal(t, plane.StatusName(handoff.Error), st.Status)
	assert.NotContains(t, st.Err, "advertises")
	assert.EqualValues(t, 1, rejected)
	assert.Zero(t, dials.Load(), "the decode dialed an address no prefill advertised")
}
