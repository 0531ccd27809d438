package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/engine"
)

// A decode dials only the transfer servers that registered prefill
// workers advertise: a connect whose params name any other host:port
// (a router's session key in the wrong hands could ask for anything) is
// refused and counted, never dialed. The decode watches the prefills'
// model cards, which carry the transfer server's address as the card's
// disaggregated endpoint and sit under a prefix of their own
// (plane.MDCPrefix), so a decode hears nothing of the other workers
// coming and going; the registrations (plane.RegistrationPrefix) name no
// role in their keys. A prefill writes its card in the transaction that
// writes its registration, under the same lease, so the two come and go
// together. An address the decode has not seen yet is checked against
// etcd before it is refused, since the router may hear of a new prefill,
// and send its connect, before the decode's watch does.

// prefillUp is a prefill's registration as a decode trusts it: under the
// lease its instance id names.
type prefillUp struct {
	id   int64
	addr string
}

// prefillOf reads a model card under plane.MDCPrefix's prefill prefix; ok
// only for a prefill's, under its own lease, with a transfer address.
func prefillOf(kv *mvccpb.KeyValue, log *slog.Logger) (prefillUp, bool) {
	var c plane.ModelEntry
	if err := json.Unmarshal(kv.Value, &c); err != nil {
		return prefillUp{}, false
	}
	id, err := plane.InstanceOfKey(string(kv.Key))
	if err != nil || kv.Lease == 0 || kv.Lease != c.InstanceID || id != c.InstanceID {
		if log != nil {
			log.Warn("prefill model card ignored: not under the lease its instance_id names", "key", string(kv.Key))
		}
		return prefillUp{}, false
	}
	ep := c.Card.RuntimeConfig.DisaggregatedEndpoint
	if c.Card.WorkerType != engine.WorkerPrefill || ep == nil || ep.Host == "" || ep.Port == 0 {
		return prefillUp{}, false
	}
	return prefillUp{id: id, addr: net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port))}, true
}

// sameAddr compares two host:port addresses, the host without case.
func sameAddr(a, b string) bool {
	ah, ap, err1 := net.SplitHostPort(a)
	bh, bp, err2 := net.SplitHostPort(b)
	return err1 == nil && err2 == nil && ap == bp && strings.EqualFold(ah, bh)
}

// advertised reports whether a prefill this worker knows of advertises
// addr.
func (l *workerLoop) advertised(addr string) bool {
	for _, a := range l.prefills {
		if sameAddr(a, addr) {
			return true
		}
	}
	return false
}

// advertisedNow asks etcd whether a registered prefill advertises addr,
// for an address the watch has not shown (yet).
func (l *workerLoop) advertisedNow(ctx context.Context, addr string) (bool, error) {
	gctx, cancel := context.WithTimeout(ctx, plane.DialTimeout)
	defer cancel()
	resp, err := l.ec.Get(gctx, l.prefillPrefix(), clientv3.WithPrefix())
	if err != nil {
		return false, fmt.Errorf("etcd %s: list %s: %w", plane.RedactedURLs(l.cfg.Etcd), l.prefillPrefix(), err)
	}
	for _, kv := range resp.Kvs {
		if p, ok := prefillOf(kv, nil); ok && sameAddr(p.addr, addr) {
			return true, nil
		}
	}
	return false, nil
}

// prefillPrefix is the prefix of the namespace's prefill model cards.
func (l *workerLoop) prefillPrefix() string {
	return plane.MDCPrefix(l.cfg.Namespace, engine.WorkerPrefill)
}

// listPrefills fills l.prefills from etcd and returns the revision to
// watch from.
func (l *workerLoop) listPrefills(ctx context.Context) (int64, error) {
	gctx, cancel := context.WithTimeout(ctx, plane.DialTimeout)
	defer cancel()
	resp, err := l.ec.Get(gctx, l.prefillPrefix(), clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcd %s: list %s: %w", plane.RedactedURLs(l.cfg.Etcd), l.prefillPrefix(), err)
	}
	for _, kv := range resp.Kvs {
		if p, ok := prefillOf(kv, l.log); ok {
			l.prefills[p.id] = p.addr
		}
	}
	return resp.Header.Revision + 1, nil
}

// watchPrefills follows the namespace's prefill model cards from rev until ctx
// ends and tells the loop of each prefill that comes or goes.
func (l *workerLoop) watchPrefills(ctx context.Context, rev int64) {
	defer l.wg.Done()
	plane.WatchPrefix(ctx, l.ec, l.prefillPrefix(), rev, l.log, func(ev *clientv3.Event) {
		var m workerMsg
		if ev.Type == mvccpb.PUT {
			p, ok := prefillOf(ev.Kv, l.log)
			if !ok {
				return
			}
			m.prefillUp = &p
		} else {
			id, err := plane.InstanceOfKey(string(ev.Kv.Key))
			if err != nil || id == 0 {
				return
			}
			m.prefillGone = id
		}
		select {
		case l.in <- m:
		case <-ctx.Done():
		}
	})
}

// unadvertised is a connect refused for its address.
type unadvertised struct {
	session uint64
	addr    string
	status  *plane.WireStatus
}

// refuseConnect counts a connect refused for its address and answers its
// transfer with an error, so the handoff it claims ends.
func (l *workerLoop) refuseConnect(u *unadvertised) {
	l.reject(plane.RejectUnadvertised, u.session)
	l.log.Warn("connect refused: no registered prefill advertises its transfer address", "addr", u.addr, "session", u.session, "transfer_id", u.status.TID)
	l.items = append(l.items, plane.Item{Status: u.status})
}
