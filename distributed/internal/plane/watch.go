package plane

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// WatchPrefix calls f with each change under prefix from revision rev
// until ctx ends, resuming after the last revision it saw when the watch
// breaks (from the compaction's, if etcd compacted past it).
func WatchPrefix(ctx context.Context, ec *clientv3.Client, prefix string, rev int64, log *slog.Logger, f func(*clientv3.Event)) {
	for ctx.Err() == nil {
		wch := ec.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				log.Warn("etcd watch broke; resuming", "prefix", prefix, "revision", rev, "err", err)
				if wr.CompactRevision > rev {
					rev = wr.CompactRevision
				}
				break
			}
			for _, ev := range wr.Events {
				f(ev)
				rev = ev.Kv.ModRevision + 1
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
