package embedded

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/internal/testbin"
)

// cluster describes a three-member cluster on loopback ports that were free
// a moment ago: startAll runs it, and Start(cfgs[i]) runs member i again.
type cluster struct {
	cfgs []Config
}

func newCluster(t *testing.T, catchUp uint64) *cluster {
	t.Helper()
	var members []string
	c := &cluster{}
	for _, name := range []string{"a", "b", "c"} {
		peer, client := loopbackURL(t), loopbackURL(t)
		members = append(members, name+"="+peer.String())
		c.cfgs = append(c.cfgs, Config{
			Dir: t.TempDir(), Name: name, PeerURLs: []url.URL{peer}, ClientURLs: []url.URL{client},
			CatchUpEntries: catchUp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
	}
	for i := range c.cfgs {
		c.cfgs[i].InitialCluster = strings.Join(members, ",")
	}
	return c
}

// loopbackURL names a free port for a member to listen on
// (testbin.FreeLoopbackAddr).
func loopbackURL(t *testing.T) url.URL {
	t.Helper()
	addr, err := testbin.FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	return url.URL{Scheme: "http", Host: addr}
}

// startAll starts every member at once: none is ready before a quorum is.
func (c *cluster) startAll(t *testing.T) []*Etcd {
	t.Helper()
	members := make([]*Etcd, len(c.cfgs))
	errs := make([]error, len(c.cfgs))
	var wg sync.WaitGroup
	for i := range c.cfgs {
		wg.Go(func() { members[i], errs[i] = Start(c.cfgs[i]) })
	}
	wg.Wait()
	// A test that stops a member itself sets its entry to nil.
	t.Cleanup(func() {
		for _, m := range members {
			if m != nil {
				m.Close()
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %s: %v", c.cfgs[i].Name, err)
		}
	}
	return members
}

// TestClusterCatchUpEntries: members of a cluster keep ClusterCatchUpEntries
// raft entries after a snapshot unless told otherwise, far fewer than etcd's
// default, and a member alone told a number keeps that.
func TestClusterCatchUpEntries(t *testing.T) {
	for _, e := range newCluster(t, 0).startAll(t) {
		if got := e.etcd.Server.Cfg.SnapshotCatchUpEntries; got != ClusterCatchUpEntries {
			t.Errorf("catch-up entries %d, want %d", got, ClusterCatchUpEntries)
		}
	}
	alone, err := Start(Config{Dir: t.TempDir(), CatchUpEntries: 42})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	if got := alone.etcd.Server.Cfg.SnapshotCatchUpEntries; got != 42 {
		t.Errorf("a member alone told 42: catch-up entries %d", got)
	}
}

// TestFollowerBeyondCatchUpGetsSnapshot: a member that was down while the
// others wrote more entries than they keep for it catches up from a
// snapshot of the leader's database, and then serves every write.
func TestFollowerBeyondCatchUpGetsSnapshot(t *testing.T) {
	const catchUp = 10
	c := newCluster(t, catchUp)
	members := c.startAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Stop a member that does not lead, then write past what the others
	// keep: etcd snapshots its state to memory every 100 applied entries
	// and then keeps only the last catchUp of them.
	lagging := 0
	for i, e := range members {
		if e.etcd.Server.Leader() != e.etcd.Server.MemberID() {
			lagging = i
			break
		}
	}
	members[lagging].Close()
	members[lagging] = nil
	writer := members[(lagging+1)%len(members)].Client()
	const writes = 300
	for i := range writes {
		if _, err := writer.Put(ctx, fmt.Sprintf("/k/%03d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	received := snapshotsReceived(t)

	back, err := Start(c.cfgs[lagging])
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	// A linearizable read on a member waits until it has applied what the
	// leader had committed.
	resp, err := back.Client().Get(ctx, "/k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != writes {
		t.Fatalf("the member that was down has %d of %d keys", resp.Count, writes)
	}
	if got := snapshotsReceived(t); got <= received {
		t.Errorf("snapshots received %v before the restart and %v after: the member caught up from entries the others should no longer keep", received, got)
	}
}

// snapshotsReceived sums etcd_network_snapshot_receive_success over the
// members of this process.
func snapshotsReceived(t *testing.T) float64 {
	t.Helper()
	fams, err := Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range fams {
		if mf.GetName() == "etcd_network_snapshot_receive_success" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
