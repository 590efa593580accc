package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"
)

// When the database file reaches its quota, etcd raises its NOSPACE alarm
// and from then on refuses every write but deletions, until an operator
// compacts, defragments and disarms it: the alarm outlives a restart, and
// the file, which deletions and compactions leave at its size, never falls
// below the quota by itself. Nobody but the process reaches the embedded
// member, so leasehold does that operator's work for it (ReclaimSpace,
// SpaceKeeper): once objects are deleted, writes resume, without etcdctl.

// SpaceHeadroom is the share of the quota the database must leave free,
// once compacted and defragmented, for ReclaimSpace to disarm the alarm:
// a database just below the quota would raise it again at the next
// writes.
const SpaceHeadroom = 0.1

// SpaceReport is what ReclaimSpace found and did.
type SpaceReport struct {
	// Alarmed: the NOSPACE alarm was raised; nothing else is set if not.
	Alarmed bool
	// Revision is where history was compacted to.
	Revision int64
	// Before and After are the database file's size in bytes, before the
	// compaction and after the defragmentation; Quota is the limit.
	Before, After, Quota int64
	// Disarmed: After left SpaceHeadroom of the quota free, and the alarm
	// was disarmed.
	Disarmed bool
}

// ReclaimSpace does nothing unless the member's NOSPACE alarm is raised.
// Then it compacts history to the current revision (a watch resuming from
// before it gets 410 Gone and lists again, as after any compaction),
// defragments the database, and disarms the alarm if the database then
// leaves SpaceHeadroom of the quota free. Writes wait while the database
// is defragmented; they were refused anyway.
func (e *Etcd) ReclaimSpace(ctx context.Context) (SpaceReport, error) {
	r := SpaceReport{Quota: e.quota}
	alarms, err := e.client.AlarmList(ctx)
	if err != nil {
		return r, fmt.Errorf("listing etcd's alarms: %w", err)
	}
	var nospace *pb.AlarmMember
	for _, a := range alarms.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE {
			nospace = a
		}
	}
	if nospace == nil {
		return r, nil
	}
	r.Alarmed = true
	st, err := e.client.Status(ctx, "")
	if err != nil {
		return r, fmt.Errorf("reading etcd's status: %w", err)
	}
	r.Revision, r.Before = st.Header.Revision, st.DbSize
	_, err = e.client.Compact(ctx, r.Revision, clientv3.WithCompactPhysical())
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return r, fmt.Errorf("compacting etcd's history: %w", err)
	}
	// The server's own call: the in-process client's has no health
	// notifier to tell, and fails.
	if err := e.etcd.Server.Defragment(); err != nil {
		return r, fmt.Errorf("defragmenting etcd's database: %w", err)
	}
	if st, err = e.client.Status(ctx, ""); err != nil {
		return r, fmt.Errorf("reading etcd's status: %w", err)
	}
	r.After = st.DbSize
	if float64(r.After) > float64(r.Quota)*(1-SpaceHeadroom) {
		return r, nil
	}
	if _, err := e.client.AlarmDisarm(ctx, (*clientv3.AlarmMember)(nospace)); err != nil {
		return r, fmt.Errorf("disarming etcd's NOSPACE alarm: %w", err)
	}
	r.Disarmed = true
	return r, nil
}

// SpaceKeeper calls ReclaimSpace when it may help: while the alarm stays
// raised, only once the revision has moved (writes are refused then, so a
// deletion moved it), as nothing else frees space. It logs what it
// reclaims, and what it could not.
type SpaceKeeper struct {
	e   *Etcd
	log *slog.Logger
	// full is the revision at which ReclaimSpace last left the alarm
	// raised; 0 if it did not.
	full int64
}

// SpaceKeeper returns the member's keeper, which logs to log.
func (e *Etcd) SpaceKeeper(log *slog.Logger) *SpaceKeeper { return &SpaceKeeper{e: e, log: log} }

// Run checks every interval until ctx ends.
func (k *SpaceKeeper) Run(ctx context.Context, clk clock.WithTicker, interval time.Duration) {
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			k.Check(ctx)
		}
	}
}

// Check calls ReclaimSpace unless the alarm was left raised at the
// current revision, and reports whether it did.
func (k *SpaceKeeper) Check(ctx context.Context) bool {
	rev := k.e.etcd.Server.KV().Rev()
	if k.full == rev {
		return false
	}
	r, err := k.e.ReclaimSpace(ctx)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		k.log.Error("reclaiming etcd's space", "err", err)
	case r.Disarmed:
		k.full = 0
		k.log.Warn("etcd's database had reached its quota: compacted, defragmented, and writable again",
			"revision", r.Revision, "sizeBefore", r.Before, "sizeAfter", r.After, "quota", r.Quota)
	case r.Alarmed:
		k.full = rev
		k.log.Error("etcd's database is full and refuses writes: delete objects (deletions are still accepted) or restart with a larger --etcd-quota-backend-bytes",
			"size", r.After, "quota", r.Quota, "sizeNeeded", int64(float64(r.Quota)*(1-SpaceHeadroom)))
	}
	return true
}
