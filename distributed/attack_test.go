package distributed

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
)

// attacker is a client of the run's NATS with every right a worker or a
// router has there, but no session key: it reads the request plane's
// subjects and publishes what it likes on them.
type attacker struct {
	t  *testing.T
	nc *nats.Conn
	ns string

	mu       sync.Mutex
	cmds     map[string][][]byte       // by subject, as published
	frames   map[string][]*plane.Frame // by subject, their bodies as read
	sessions map[string]uint64         // a session seen on each cmd subject
}

func newAttacker(t *testing.T, natsURL, ns string, opts ...nats.Option) *attacker {
	t.Helper()
	// NoEcho: what it reads is the plane's own traffic, not its forgeries.
	nc, err := nats.Connect(natsURL, append([]nats.Option{nats.NoEcho()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	a := &attacker{t: t, nc: nc, ns: ns, cmds: map[string][][]byte{}, frames: map[string][]*plane.Frame{}, sessions: map[string]uint64{}}
	_, err = nc.Subscribe("mocker."+ns+".*.cmd", func(m *nats.Msg) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.cmds[m.Subject] = append(a.cmds[m.Subject], m.Data)
		// The session is in the clear, in the tag and in the body.
		if tags, _, err := plane.Unseal(m.Data); err == nil && len(tags) == 1 && a.sessions[m.Subject] == 0 {
			a.sessions[m.Subject] = tags[0].ID
		}
	})
	require.NoError(t, err)
	_, err = nc.Subscribe("mocker."+ns+".*.out", func(m *nats.Msg) {
		if _, body, err := plane.Unseal(m.Data); err == nil {
			f := new(plane.Frame)
			if plane.DecodeFrame(body, f) == nil {
				a.mu.Lock()
				a.frames[m.Subject] = append(a.frames[m.Subject], f)
				a.mu.Unlock()
			}
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return a
}

// session is a router session seen on worker reg's command subject.
func (a *attacker) session(reg plane.Registration) uint64 {
	a.t.Helper()
	var s uint64
	require.Eventually(a.t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		s = a.sessions[reg.CmdSubject]
		return s != 0
	}, 30*time.Second, 5*time.Millisecond, "a session on %s", reg.CmdSubject)
	return s
}

// head is the next frame Seq worker reg will publish, as its frames say.
func (a *attacker) head(reg plane.Registration) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := uint64(1)
	for _, f := range a.frames[reg.OutSubject] {
		h = max(h, f.Head, f.Seq+1)
	}
	return h
}

// command publishes c sealed under a key of the attacker's own, filed
// under tagID.
func (a *attacker) command(reg plane.Registration, tagID uint64, c plane.Command) {
	body, err := plane.EncodeCommand(&c)
	require.NoError(a.t, err)
	require.NoError(a.t, a.nc.Publish(reg.CmdSubject, plane.Seal(plane.DirCommand, reg.CmdSubject, body, plane.Keyed{ID: tagID, Key: plane.NewMACKey()})))
}

// frame publishes f as worker reg's, sealed for tagID under a key of the
// attacker's own.
func (a *attacker) frame(reg plane.Registration, tagID uint64, f plane.Frame) {
	body, err := plane.EncodeFrame(&f)
	require.NoError(a.t, err)
	require.NoError(a.t, a.nc.Publish(reg.OutSubject, plane.Seal(plane.DirFrame, reg.OutSubject, body, plane.Keyed{ID: tagID, Key: plane.NewMACKey()})))
}

// raw publishes data as it is.
func (a *attacker) raw(subject string, data []byte) {
	require.NoError(a.t, a.nc.Publish(subject, data))
}

// replay publishes again every command seen on reg's subject, in order.
func (a *attacker) replay(reg plane.Registration) int {
	a.mu.Lock()
	cmds := append([][]byte(nil), a.cmds[reg.CmdSubject]...)
	a.mu.Unlock()
	for _, data := range cmds {
		a.raw(reg.CmdSubject, data)
	}
	return len(cmds)
}

// registrations are the namespace's worker registrations by name.
func registrations(t *testing.T, ec *clientv3.Client, ns string) map[string]plane.Registration {
	t.Helper()
	resp, err := ec.Get(context.Background(), plane.RegistrationPrefix(ns), clientv3.WithPrefix())
	require.NoError(t, err)
	out := map[string]plane.Registration{}
	for _, kv := range resp.Kvs {
		var reg plane.Registration
		require.NoError(t, json.Unmarshal(kv.Value, &reg))
		out[reg.Name] = reg
	}
	return out
}

// attack is one forgery of the list: it publishes its messages
// and says how many of them a gate must count (the router's frames, the
// workers' commands). The test looks for the harm each would do.
type attack struct {
	name string
	run  func(a *attacker, p, d plane.Registration, router int64) (frames, commands int)
}

// forgeries is every attack on the request plane, each of which today's
// plane must drop and count.
func forgeries(dialed func() string) []attack {
	return []attack{
		{name: "leave marker on a worker's out subject, unsealed", run: func(a *attacker, p, _ plane.Registration, _ int64) (int, int) {
			a.raw(p.OutSubject, []byte(`{"seq":0,"leave":"x"}`))
			return 1, 0
		}},
		{name: "leave marker sealed under a guessed tag", run: func(a *attacker, p, _ plane.Registration, _ int64) (int, int) {
			a.frame(p, a.session(p), plane.Frame{Leave: "x"})
			a.frame(p, plane.NewSessionID(), plane.Frame{Leave: "x"})
			return 2, 0
		}},
		{name: "bye with the session id read off cmd", run: func(a *attacker, p, d plane.Registration, _ int64) (int, int) {
			for _, reg := range []plane.Registration{p, d} {
				s := a.session(reg)
				a.command(reg, s, plane.Command{Op: plane.OpBye, Session: s})
			}
			return 0, 2
		}},
		{name: "coupled hello to each worker, naming the live router", run: func(a *attacker, p, d plane.Registration, router int64) (int, int) {
			for _, reg := range []plane.Registration{p, d} {
				s := plane.NewSessionID()
				a.command(reg, s, plane.Command{Op: plane.OpHello, Session: s, Seq: 1, Router: router, Coupled: true})
			}
			return 0, 2
		}},
		{name: "hello naming a router that is not registered", run: func(a *attacker, p, _ plane.Registration, _ int64) (int, int) {
			s := plane.NewSessionID()
			a.command(p, s, plane.Command{Op: plane.OpHello, Session: s, Seq: 1, Router: 0x7777, Coupled: true})
			return 0, 1
		}},
		{name: "open_room flood in the live session and in made-up ones", run: func(a *attacker, p, _ plane.Registration, _ int64) (int, int) {
			s := a.session(p)
			const n = 300
			for i := range uint64(n) {
				a.command(p, s, plane.Command{Op: plane.OpOpenRoom, Session: s, Seq: 1_000_000 + i, TID: 1_000_000 + i, ID: i})
				a.command(p, plane.NewSessionID(), plane.Command{Op: plane.OpOpenRoom, Seq: 2, TID: 2_000_000 + i, ID: i})
			}
			return 0, 2 * n
		}},
		{name: "connect making the decode dial the attacker", run: func(a *attacker, _, d plane.Registration, _ int64) (int, int) {
			host, port, err := net.SplitHostPort(dialed())
			require.NoError(a.t, err)
			params := fmt.Sprintf(`{"remote_host":%q,"remote_port":%s,"transfer_id":1,"transfer_token":"x"}`, host, port)
			s := a.session(d)
			for seq := range uint64(50) {
				a.command(d, s, plane.Command{Op: plane.OpConnect, Session: s, Seq: 2 + seq, TID: 1, ID: 1, Params: json.RawMessage(params)})
			}
			return 0, 50
		}},
		{name: "cancel of every request id", run: func(a *attacker, p, d plane.Registration, _ int64) (int, int) {
			n := 0
			for _, reg := range []plane.Registration{p, d} {
				s := a.session(reg)
				for id := range uint64(100) {
					a.command(reg, s, plane.Command{Op: plane.OpCancel, Session: s, Seq: 2 + id, ID: id})
					n++
				}
			}
			return 0, n
		}},
		{name: "a recorded command message cut short, or with a cancel spliced onto it", run: func(a *attacker, p, d plane.Registration, _ int64) (int, int) {
			for _, reg := range []plane.Registration{p, d} {
				s := a.session(reg)
				a.mu.Lock()
				recorded := a.cmds[reg.CmdSubject]
				data := recorded[len(recorded)-1]
				a.mu.Unlock()
				// The MAC covers the whole message, so neither verifies.
				a.raw(reg.CmdSubject, data[:len(data)-1])
				spliced, err := plane.AppendCommand(append([]byte(nil), data...), &plane.Command{Op: plane.OpCancel, Session: s, Seq: 1 << 30, ID: 1})
				require.NoError(a.t, err)
				a.raw(reg.CmdSubject, spliced)
			}
			return 0, 4
		}},
		{name: "unsealed commands, as a plain NATS client writes them", run: func(a *attacker, p, d plane.Registration, _ int64) (int, int) {
			a.raw(p.CmdSubject, []byte(`{"op":"cancel","id":1}`))
			a.raw(d.CmdSubject, []byte(`{"op":"bye","session":1}`))
			return 0, 2
		}},
		{name: "frames at the next seq with a peak of 4e9 held blocks", run: func(a *attacker, p, d plane.Registration, _ int64) (int, int) {
			n := 0
			for _, reg := range []plane.Registration{p, d} {
				s, head := a.session(reg), a.head(reg)
				for i := range uint64(20) {
					out := &plane.WireOutput{Start: 0, End: 1, Metrics: engine.Metrics{HeldBlocks: 4_000_000_000}}
					a.frame(reg, s, plane.Frame{Seq: head + i, Head: head + i + 1, Items: []plane.Item{{Output: out}},
						Acks: []plane.SessionAck{{Session: s, Seq: 1 << 40, From: head}}})
					n++
				}
			}
			return n, 0
		}},
	}
}

// TestAttack_ForgedPlaneMessagesAreDroppedAndCounted runs a disaggregated
// cluster on workers in their own loops while a client with every right
// on NATS but no session key publishes each forgery of the list,
// and replays every command it saw: the run passes its thresholds (every
// request completes, holds balance, nothing leaks, no forged figure
// shows) and the plane counts what it dropped. Once on open services,
// once on services that require credentials, which the attacker has.
func TestAttack_ForgedPlaneMessagesAreDroppedAndCounted(t *testing.T) {
	t.Parallel()
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "open", true: "authenticated"}[secure], func(t *testing.T) {
			t.Parallel()
			forgedPlaneMessages(t, startedServices(t, secure))
		})
	}
}

func forgedPlaneMessages(t *testing.T, ls *localServices) {
	const ns = "attack"
	startWorkers(t, ls, ns,
		worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: []byte(`{"speedup_ratio": 10}`), MaxRooms: 64},
		worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: []byte(`{"speedup_ratio": 10}`)})
	regs := registrations(t, etcdClient(t, ls), ns)
	p, d := regs["p0"], regs["d0"]
	var creds []nats.Option
	if ls.natsAuth.User != "" {
		creds = append(creds, nats.UserInfo(ls.natsAuth.User, ls.natsAuth.Password.Reveal()))
	}
	a := newAttacker(t, ls.natsURL, ns, creds...)

	// A transfer server of the attacker's: a decode that obeys a forged
	// connect dials it.
	var dials atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			_ = conn.Close()
		}
	}()

	c, err := cluster.New(attachConfig(ls, ns))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	tr := c.Transport().(*transport)
	tr.mu.Lock()
	router := int64(tr.router)
	tr.mu.Unlock()

	load := func(n int) []cluster.Result {
		results := make([]cluster.Result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				results[i] = c.Generate(context.Background(), cluster.Request{PromptTokens: 256, MaxTokens: 16})
			})
		}
		wg.Wait()
		return results
	}
	ended := load(8)
	var wantFrames, wantCommands int
	var during []cluster.Result
	var wg sync.WaitGroup
	wg.Go(func() { during = load(32) })
	for _, at := range forgeries(func() string { return l.Addr().String() }) {
		f, cm := at.run(a, p, d, router)
		wantFrames += f
		wantCommands += cm
	}
	replayed := a.replay(p) + a.replay(d)
	wg.Wait()
	ended = append(ended, during...)
	// After the attack, so the workers' frames carry their counts.
	ended = append(ended, load(16)...)

	for _, r := range ended {
		assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
		assert.Equal(t, "p0", r.PrefillWorker)
		assert.Equal(t, "d0", r.DecodeWorker)
		assert.Equal(t, "transferred", r.HoldOutcome)
		assert.Equal(t, 16, r.OutputTokens)
	}
	s := drainedClean(t, c)
	assert.EqualValues(t, len(ended), s.Completed, "every request completed once: no replayed command ran twice")
	assert.Equal(t, s.Holds, s.HoldsReleased, "every hold ended by its transfer")
	assert.Less(t, s.PeakHeldBlocks, 1024, "no forged figure reached the stats")
	require.NoError(t, c.CheckInvariants())
	assert.Zero(t, dials.Load(), "the decode dialed the attacker")
	assert.Positive(t, replayed)

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		ps := tr.PlaneStats()
		var workers uint64
		for _, n := range ps.WorkerRejected {
			workers += n
		}
		var frames uint64
		for _, n := range ps.RejectedFrames {
			frames += n
		}
		assert.GreaterOrEqual(ct, frames, uint64(wantFrames), "frames dropped at the router: %v", ps.RejectedFrames)
		assert.GreaterOrEqual(ct, workers, uint64(wantCommands), "commands dropped at the workers: %v", ps.WorkerRejected)
		assert.Equal(ct, frames+workers, ps.Rejected)
	}, 30*time.Second, 20*time.Millisecond)
	ps := tr.PlaneStats()
	assert.Equal(t, ps.Rejected, tr.PlaneRejected(), "what the summary shows")
	t.Logf("forged %d frames and %d commands, replayed %d: %+v", wantFrames, wantCommands, replayed, ps)
	assert.Positive(t, ps.RejectedFrames[plane.RejectBadMAC], "forged frames fail their MAC")
	assert.True(t, strings.Contains(fmt.Sprint(ps.WorkerRejected), "p0") && strings.Contains(fmt.Sprint(ps.WorkerRejected), "d0"),
		"both workers dropped commands: %v", ps.WorkerRejected)
}

// TestAttack_RegistrationsNotUnderTheirLeaseAreIgnored: a worker
// registration written without a lease, or under a lease its instance_id
// does not name, joins no router, whether it was there when the router
// listed the namespace or came later.
func TestAttack_RegistrationsNotUnderTheirLeaseAreIgnored(t *testing.T) {
	t.Parallel()
	ls := services(t)
	const ns = "fake-reg"
	startWorkers(t, ls, ns, worker.Config{Name: "w0", Role: engine.WorkerAggregated, Args: []byte(`{"speedup_ratio": 10}`)})
	ec := etcdClient(t, ls)
	real := registrations(t, ec, ns)["w0"]
	other, err := ec.Grant(context.Background(), 60)
	require.NoError(t, err)
	fake := func(name string, id int64, opts ...clientv3.OpOption) {
		reg := real
		reg.Name, reg.InstanceID = name, id
		reg.CmdSubject, reg.OutSubject = plane.CmdSubject(ns, id), plane.OutSubject(ns, id)
		data, err := json.Marshal(reg)
		require.NoError(t, err)
		_, err = ec.Put(context.Background(), plane.RegistrationKey(ns, id), string(data), opts...)
		require.NoError(t, err)
	}
	fake("no-lease", 0x51)
	fake("wrong-lease", 0x52, clientv3.WithLease(other.ID))

	logs := &tailBuffer{max: 1 << 20}
	c, err := cluster.New(cluster.Config{Name: ns, Workers: 1, Args: map[string]any{"speedup_ratio": 10},
		Transport: ls.transport(ns),
		Logger:    slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	fake("late-no-lease", 0x53)
	fake("late-wrong-lease", 0x54, clientv3.WithLease(other.ID))
	require.Eventually(t, func() bool {
		return strings.Count(string(logs.Bytes()), "registration ignored: not under the lease its instance_id names") == 4
	}, 30*time.Second, 10*time.Millisecond, "a warning for each fake")
	// Requests that land on a fake would never end.
	for range 8 {
		r := c.Generate(context.Background(), cluster.Request{PromptTokens: 64, MaxTokens: 4})
		require.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
	}
	var names []string
	for _, w := range c.Stats().Workers {
		names = append(names, w.Name)
	}
	assert.Equal(t, []string{"w0"}, names)
}

// TestAuth_ClientsWithoutCredentialsCannotConnect: on services that
// require credentials (as transport 'local' starts them), a NATS or etcd
// client without them, or with a wrong password, is refused, and the
// refusal does not echo the password.
func TestAuth_ClientsWithoutCredentialsCannotConnect(t *testing.T) {
	t.Parallel()
	ls := securedServices(t)
	_, err := nats.Connect(ls.natsURL)
	require.Error(t, err, "NATS without credentials")
	_, err = plane.DialNATS(ls.natsURL, "wrong", cluster.NATSAuth{User: ls.natsAuth.User, Password: "hunter2-wrong"})
	require.Error(t, err)
	assert.ErrorIs(t, err, nats.ErrAuthorization)
	assert.NotContains(t, err.Error(), "hunter2")
	_, err = plane.DialNATS("nats://mocker:hunter2-in-url@"+strings.TrimPrefix(ls.natsURL, "nats://"), "wrong-url", cluster.NATSAuth{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")

	for name, auth := range map[string]cluster.EtcdAuth{
		"no credentials": {},
		"wrong password": {Username: ls.etcdAuth.Username, Password: "hunter2-wrong"},
	} {
		ec, err := plane.DialEtcd(context.Background(), []string{ls.etcdURL}, auth)
		if err == nil {
			// Without credentials etcd answers a range only when auth is
			// off: a write must fail all the same.
			_, err = ec.Put(context.Background(), plane.RegistrationKey("x", 1), "{}")
			_ = ec.Close()
		}
		require.Error(t, err, name)
		assert.NotContains(t, err.Error(), "hunter2", name)
	}

	// With them, both work.
	nc, err := plane.DialNATS(ls.natsURL, "right", ls.natsAuth)
	require.NoError(t, err)
	nc.Close()
	ec, err := plane.DialEtcd(context.Background(), []string{ls.etcdURL}, ls.etcdAuth)
	require.NoError(t, err)
	_ = ec.Close()
}

// TestAuth_SecretsNeverPrint: a config's secrets print, log and encode
// as "[redacted]".
func TestAuth_SecretsNeverPrint(t *testing.T) {
	t.Parallel()
	tc := cluster.TransportConfig{Etcd: []string{"http://root:hunter2@127.0.0.1:2379"}, NATS: "nats://u:hunter2@127.0.0.1:4222",
		NATSAuth: cluster.NATSAuth{User: "u", Password: "hunter2"}, EtcdAuth: cluster.EtcdAuth{Username: "root", Password: "hunter2"}}
	data, err := json.Marshal(tc)
	require.NoError(t, err)
	var logs strings.Builder
	slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "nats", tc.NATSAuth, "password", tc.EtcdAuth.Password)
	// The URLs are the config's own (a user who writes a password into one
	// sees it there); what follows them must not show it.
	_, auths, found := strings.Cut(string(data), "nats_auth")
	require.True(t, found, "the config encodes its NATS credentials: %s", data)
	for _, out := range []string{auths, fmt.Sprintf("%v %+v %#v", tc.NATSAuth, tc.EtcdAuth, tc.EtcdAuth),
		logs.String(), plane.RedactedURLs(tc.Etcd), cluster.RedactURL(tc.NATS)} {
		assert.NotContains(t, out, "hunter2")
	}
}
