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
	k := e.SpaceKeeper(slog.New(slog.NewTextHandler(&logs, nil)))
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
