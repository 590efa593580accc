package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fill puts values of 64 KiB under prefix until etcd refuses one for its
// quota, and returns how many it took.
func fill(t *testing.T, c *clientv3.Client, prefix string) int {
	t.Helper()
	value := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		_, err := c.Put(context.Background(), fmt.Sprintf("%s%04d", prefix, i), value)
		if errors.Is(err, rpctypes.ErrNoSpace) {
			return i
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 1000 {
			t.Fatal("no quota reached")
		}
	}
}

// TestReclaimSpace: a member whose database reached its quota refuses
// writes until objects are deleted and the space reclaimed; it is not
// disarmed while the database would still be full.
func TestReclaimSpace(t *testing.T) {
	e, err := Start(Config{Dir: t.TempDir(), QuotaBackendBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, c := context.Background(), e.Client()
	if r, err := e.ReclaimSpace(ctx); err != nil || r.Alarmed {
		t.Fatalf("before the quota: %+v, %v", r, err)
	}
	if n := fill(t, c, "/full/"); n < 10 {
		t.Fatalf("only %d values fit in the quota", n)
	}
	var logs bytes.Buffer
	k := e.SpaceKeeper(slog.New(slog.NewTextHandler(&logs, nil)), "--quota")
	if !k.Check(ctx) {
		t.Fatal("the keeper did not try")
	}
	if _, err := c.Put(ctx, "/other", "x"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("a write with the database still full: %v, want %v", err, rpctypes.ErrNoSpace)
	}
	if !strings.Contains(logs.String(), "is full") {
		t.Errorf("logged %q", logs.String())
	}
	if k.Check(ctx) {
		t.Error("the keeper tried again with nothing deleted")
	}

	// Deletions are accepted; the space is reclaimed at the next check.
	if _, err := c.Delete(ctx, "/full/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/other", "x"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("a write before the space was reclaimed: %v, want %v", err, rpctypes.ErrNoSpace)
	}
	if !k.Check(ctx) {
		t.Fatal("the keeper did not try after a deletion")
	}
	if !strings.Contains(logs.String(), "writable again") {
		t.Errorf("logged %q", logs.String())
	}
	if _, err := c.Put(ctx, "/other", "x"); err != nil {
		t.Fatalf("a write after the space was reclaimed: %v", err)
	}
	if r, err := e.ReclaimSpace(ctx); err != nil || r.Alarmed {
		t.Fatalf("once disarmed: %+v, %v", r, err)
	}
}

// TestReclaimSpaceAfterALargerQuota: the alarm outlives a restart; a
// restart with a larger quota is writable at once, nothing deleted.
func TestReclaimSpaceAfterALargerQuota(t *testing.T) {
	dir := t.TempDir()
	e, err := Start(Config{Dir: dir, QuotaBackendBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, e.Client(), "/full/")
	// etcd checks a write against the database's size at its last
	// commit, which comes every 100 ms: writes that come faster run past
	// the quota, by as much again at times. The larger quota leaves room
	// for what was written.
	ctx := context.Background()
	st, err := e.Client().Status(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	e.Close()

	larger := 2*st.DbSize + 1<<20
	e, err = Start(Config{Dir: dir, QuotaBackendBytes: larger})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Client().Put(ctx, "/other", "x"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("a write after the restart, before the space was reclaimed: %v, want %v", err, rpctypes.ErrNoSpace)
	}
	r, err := e.ReclaimSpace(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Alarmed || !r.Disarmed || r.Quota != larger || r.After > r.Before {
		t.Fatalf("%+v", r)
	}
	if _, err := e.Client().Put(ctx, "/other", "x"); err != nil {
		t.Fatalf("a write after the space was reclaimed: %v", err)
	}
}

// TestReclaimSpaceInACluster: in a cluster each member raises its own
// NOSPACE alarm and its keeper reclaims its own database's space; once
// objects are deleted and every member has checked, writes resume.
func TestReclaimSpaceInACluster(t *testing.T) {
	c := newCluster(t, 0)
	for i := range c.cfgs {
		c.cfgs[i].QuotaBackendBytes = 4 << 20
	}
	members := c.startAll(t)
	ctx, client := context.Background(), members[0].Client()
	if n := fill(t, client, "/full/"); n < 10 {
		t.Fatalf("only %d values fit in the quota", n)
	}
	// The keepers' first checks come after the deletion: how much a
	// compaction and a defragmentation give back before it depends on how
	// etcd batched the writes, and a check then could find room enough to
	// disarm (TestReclaimSpace covers a keeper that may not).
	var logs bytes.Buffer
	keepers := make([]*SpaceKeeper, len(members))
	for i, m := range members {
		keepers[i] = m.SpaceKeeper(slog.New(slog.NewTextHandler(&logs, nil)), "--quota")
	}
	if _, err := client.Put(ctx, "/other", "x"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("a write with the database full: %v, want %v", err, rpctypes.ErrNoSpace)
	}
	if _, err := client.Delete(ctx, "/full/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	// A member raises its alarm in a raft request of its own as it
	// refuses a write, and another member's keeper reads the alarms its
	// own member has applied: an alarm raised by a refusal in one round is
	// found by a later round, as by the keepers' next ticks. A
	// linearizable read through each member before each later round
	// brings it up to what was committed, the alarms included, so the
	// rounds need no wait between them.
	var errs []error
	for round := 0; round == 0 || len(errs) > 0; round++ {
		if round == 10 {
			t.Fatalf("writes still refused after %d rounds of checks: %v\n%s", round, errs, logs.String())
		}
		for _, m := range members {
			if _, err := m.Client().Get(ctx, "/other"); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range keepers {
			k.Check(ctx)
		}
		errs = nil
		for i, m := range members {
			if _, err := m.Client().Put(ctx, "/other", "x"); err != nil {
				errs = append(errs, fmt.Errorf("a write through member %d: %w", i, err))
			}
		}
	}
	alarms, err := client.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(alarms.Alarms) > 0 {
		t.Errorf("alarms left once every member took writes: %v\n%s", alarms.Alarms, logs.String())
	}
}

// TestDefragmentNearTheQuota: a database file near its quota, of free
// pages that a compaction left, is defragmented before a write raises the
// alarm, and history is not compacted for it; a file near its quota with
// its data is left alone.
func TestDefragmentNearTheQuota(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	e, err := Start(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// restart runs the member again with its file (or, with inUse, the
	// data in it) at share of the quota, or with the default quota for a
	// share of 0.
	restart := func(share float64, inUse bool) {
		t.Helper()
		st, err := e.Client().Status(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
		quota := int64(DefaultQuotaBackendBytes)
		if size := st.DbSize; share > 0 {
			if inUse {
				size = st.DbSizeInUse
			}
			quota = int64(float64(size) / share)
		}
		if e, err = Start(Config{Dir: dir, QuotaBackendBytes: quota}); err != nil {
			t.Fatal(err)
		}
	}
	value := strings.Repeat("x", 64<<10)
	for i := range 64 {
		if _, err := e.Client().Put(ctx, fmt.Sprintf("/big/%02d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	// The data itself near the quota: the free pages bbolt keeps in the
	// file (a few per cent, from run to run) do not count.
	restart(0.95, true)
	if r, err := e.ReclaimSpace(ctx); err != nil || r.Alarmed || r.Defragmented {
		t.Fatalf("with the data near the quota: %+v, %v", r, err)
	}
	restart(0, false)

	del, err := e.Client().Delete(ctx, "/big/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client().Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client().Put(ctx, "/after", "x"); err != nil {
		t.Fatal(err)
	}
	restart(0.95, false)
	defer e.Close()
	var logs bytes.Buffer
	k := e.SpaceKeeper(slog.New(slog.NewTextHandler(&logs, nil)), "--quota")
	if !k.Check(ctx) {
		t.Fatal("the keeper did not try")
	}
	if !strings.Contains(logs.String(), "defragmented") {
		t.Errorf("logged %q", logs.String())
	}
	st, err := e.Client().Status(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !fits(st.DbSize, e.quota) {
		t.Errorf("after the keeper: a file of %d bytes, against a quota of %d", st.DbSize, e.quota)
	}
	// Compacted to the deletion by the test, and not beyond by the keeper.
	if _, err := e.Client().Get(ctx, "/after", clientv3.WithRev(del.Header.Revision)); err != nil {
		t.Errorf("a read at the deletion's revision after the keeper: %v", err)
	}
	if _, err := e.Client().Put(ctx, "/later", "x"); err != nil {
		t.Errorf("a write after the keeper: %v", err)
	}
}
