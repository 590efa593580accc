package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/tick"
)

// When the database file reaches its quota, etcd raises its NOSPACE alarm
// and from then on refuses every write but deletions, until an operator
// compacts, defragments and disarms it: the alarm outlives a restart, and
// the file, which deletions and compactions leave at its size, never falls
// below the quota by itself. Nobody but the process reaches the embedded
// member, so leasehold does that operator's work for it (ReclaimSpace,
// SpaceKeeper): once objects are deleted, writes resume, without etcdctl.
// A `leasehold etcd` member of a cluster does the same for its own
// database and its own alarm.

// SpaceHeadroom is the share of the quota the database must leave free,
// once compacted and defragmented, for ReclaimSpace to disarm the alarm:
// a database just below the quota would raise it again at the next
// writes.
const SpaceHeadroom = 0.1

// SpaceReport is what ReclaimSpace found and did.
type SpaceReport struct {
	// Alarmed: a NOSPACE alarm was raised, by this member or another.
	Alarmed bool
	// Alarms are the members whose NOSPACE alarm was raised, by ID.
	Alarms []uint64
	// Revision is where history was compacted to; 0 if it was not.
	Revision int64
	// Before and After are the database file's size in bytes, before the
	// compaction and after the defragmentation; Quota is the limit.
	Before, After, Quota int64
	// Defragmented: the database was defragmented.
	Defragmented bool
	// Disarmed: After left SpaceHeadroom of the quota free, and the
	// member's own alarm was disarmed.
	Disarmed bool
}

// fits reports whether a database file of size bytes leaves SpaceHeadroom
// of quota free.
func fits(size, quota int64) bool { return float64(size) <= float64(quota)*(1-SpaceHeadroom) }

// ReclaimSpace acts when the database is full, or nearly so.
//
// While a NOSPACE alarm is raised it compacts history to the current
// revision (a watch resuming from before it gets 410 Gone and lists again,
// as after any compaction), defragments the member's database, and
// disarms the member's own alarm if the database then leaves
// SpaceHeadroom of the quota free. Writes wait while the database is
// defragmented; they were refused anyway. In a cluster each member
// raises an alarm of its own and its keeper disarms that one (see
// ownNoSpace), but every member defragments: etcd checks a write against
// the file's size on the member that receives it, and a member whose file
// is still at the quota would raise the alarm again at its next write.
//
// Without an alarm it defragments, and does not compact, when the file
// has less than SpaceHeadroom of the quota free but the data in it would
// leave that free, so that the free pages that compactions leave do not
// raise the alarm.
func (e *Etcd) ReclaimSpace(ctx context.Context) (SpaceReport, error) {
	r := SpaceReport{Quota: e.quota}
	alarms, err := e.client.AlarmList(ctx)
	if err != nil {
		return r, fmt.Errorf("listing etcd's alarms: %w", err)
	}
	own, err := e.ownNoSpace(ctx, alarms.Alarms)
	if err != nil {
		return r, err
	}
	r.Alarms = noSpace(alarms.Alarms)
	r.Alarmed = len(r.Alarms) > 0
	st, err := e.client.Status(ctx, "")
	if err != nil {
		return r, fmt.Errorf("reading etcd's status: %w", err)
	}
	r.Before, r.After = st.DbSize, st.DbSize
	if !r.Alarmed && (fits(st.DbSize, r.Quota) || !fits(st.DbSizeInUse, r.Quota)) {
		return r, nil
	}
	if r.Alarmed {
		r.Revision = st.Header.Revision
		_, err = e.client.Compact(ctx, r.Revision, clientv3.WithCompactPhysical())
		if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			return r, fmt.Errorf("compacting etcd's history: %w", err)
		}
	}
	// The server's own call: the in-process client's has no health
	// notifier to tell, and fails.
	if err := e.etcd.Server.Defragment(); err != nil {
		return r, fmt.Errorf("defragmenting etcd's database: %w", err)
	}
	r.Defragmented = true
	if st, err = e.client.Status(ctx, ""); err != nil {
		return r, fmt.Errorf("reading etcd's status: %w", err)
	}
	r.After = st.DbSize
	if own == nil || !fits(r.After, r.Quota) {
		return r, nil
	}
	if _, err := e.client.AlarmDisarm(ctx, (*clientv3.AlarmMember)(own)); err != nil {
		return r, fmt.Errorf("disarming etcd's NOSPACE alarm: %w", err)
	}
	r.Disarmed = true
	return r, nil
}

// noSpace are the IDs of the members whose NOSPACE alarm is among alarms,
// in order.
func noSpace(alarms []*pb.AlarmMember) []uint64 {
	var ids []uint64
	for _, a := range alarms {
		if a.Alarm == pb.AlarmType_NOSPACE {
			ids = append(ids, a.MemberID)
		}
	}
	slices.Sort(ids)
	return ids
}

// ownNoSpace is the NOSPACE alarm among alarms that the member answers
// for: the one it raised itself, in a cluster, where each member raises
// its own; any, for a member alone, whose alarm a restored snapshot may
// have brought under another member's ID.
func (e *Etcd) ownNoSpace(ctx context.Context, alarms []*pb.AlarmMember) (*pb.AlarmMember, error) {
	var other *pb.AlarmMember
	for _, a := range alarms {
		if a.Alarm != pb.AlarmType_NOSPACE {
			continue
		}
		if a.MemberID == uint64(e.etcd.Server.MemberID()) {
			return a, nil
		}
		other = a
	}
	if other == nil {
		return nil, nil
	}
	members, err := e.client.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return nil, fmt.Errorf("listing etcd's members: %w", err)
	}
	if len(members.Members) > 1 {
		return nil, nil
	}
	return other, nil
}

// SpaceKeeper calls ReclaimSpace when it may help: while the alarm stays
// raised, only once the revision has moved (writes are refused then, so a
// deletion moved it), as nothing else frees space. It logs what it
// reclaims, and what it could not.
type SpaceKeeper struct {
	e         *Etcd
	log       *slog.Logger
	quotaFlag string // the command's flag that sets the quota
	// full is the revision at which ReclaimSpace last left an alarm
	// raised, 0 if it did not, and alarms the members' alarms it found.
	full   int64
	alarms []uint64
}

// SpaceKeeper returns the member's keeper, which logs to log, naming
// quotaFlag as the flag that sets the quota.
func (e *Etcd) SpaceKeeper(log *slog.Logger, quotaFlag string) *SpaceKeeper {
	return &SpaceKeeper{e: e, log: log, quotaFlag: quotaFlag}
}

// Run checks every interval until ctx ends.
func (k *SpaceKeeper) Run(ctx context.Context, clk clock.WithTicker, interval time.Duration) {
	tick.Every(ctx, clk, interval, func() { k.Check(ctx) })
}

// Check calls ReclaimSpace unless it left an alarm raised at the current
// revision and the members' alarms are still those it found, and reports
// whether it did.
func (k *SpaceKeeper) Check(ctx context.Context) bool {
	rev := k.e.etcd.Server.KV().Rev()
	if k.full == rev {
		// Nothing was deleted since, but in a cluster another member may
		// have raised its alarm or disarmed it.
		alarms, err := k.e.client.AlarmList(ctx)
		if err != nil || slices.Equal(noSpace(alarms.Alarms), k.alarms) {
			return false
		}
	}
	r, err := k.e.ReclaimSpace(ctx)
	k.alarms = r.Alarms
	switch {
	case ctx.Err() != nil:
	case err != nil:
		k.log.Error("reclaiming etcd's space", "err", err)
	case r.Disarmed:
		k.full = 0
		k.log.Warn("etcd's database had reached its quota: compacted, defragmented, and writable again",
			"revision", r.Revision, "sizeBefore", r.Before, "sizeAfter", r.After, "quota", r.Quota)
	case r.Alarmed && fits(r.After, r.Quota):
		// Another member's alarm, which its own keeper disarms.
		k.full = rev
		k.log.Warn("another etcd member's database reached its quota: compacted and defragmented this member's",
			"revision", r.Revision, "sizeBefore", r.Before, "sizeAfter", r.After, "quota", r.Quota)
	case r.Alarmed:
		k.full = rev
		k.log.Error("etcd's database is full and refuses writes: delete objects (deletions are still accepted) or restart with a larger "+k.quotaFlag,
			"size", r.After, "quota", r.Quota, "sizeNeeded", int64(float64(r.Quota)*(1-SpaceHeadroom)))
	case r.Defragmented:
		k.log.Info("etcd's database file neared its quota with free pages in it: defragmented",
			"sizeBefore", r.Before, "sizeAfter", r.After, "quota", r.Quota)
	}
	return true
}
