package embedded

import (
	"strings"
	"testing"

	"go.etcd.io/etcd/server/v3/etcdserver"
)

// TestSingleMemberRaftLog: a member alone keeps few raft entries in memory
// after a snapshot, since each can hold a group commit of MaxBatch writes,
// and few on disk to read at a start; it does not wait long to elect itself.
func TestSingleMemberRaftLog(t *testing.T) {
	e, err := Start(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got := e.etcd.Server.Cfg.SnapshotCatchUpEntries; got != SingleMemberCatchUpEntries {
		t.Errorf("catch-up entries %d, want %d", got, SingleMemberCatchUpEntries)
	}
	if SingleMemberCatchUpEntries >= etcdserver.DefaultSnapshotCatchUpEntries {
		t.Errorf("a single member should keep fewer entries than etcd's default %d", etcdserver.DefaultSnapshotCatchUpEntries)
	}
	if got := e.etcd.Config().MaxWalFiles; got != SingleMemberWALFiles {
		t.Errorf("WAL files kept %d, want %d", got, SingleMemberWALFiles)
	}
	if got := e.etcd.Config().SnapshotCount; got != SingleMemberSnapshotCount {
		t.Errorf("snapshot count %d, want %d", got, SingleMemberSnapshotCount)
	}
	if cfg := e.etcd.Config(); cfg.TickMs != SingleMemberTickMs || cfg.ElectionMs != SingleMemberElectionMs {
		t.Errorf("tick %d ms, election %d ms; want %d and %d", cfg.TickMs, cfg.ElectionMs, SingleMemberTickMs, SingleMemberElectionMs)
	}
}

// TestDirInUse: a second member on a directory in use is refused at once
// (etcd alone waits for its database's lock for ever); once the first is
// closed, the directory is free.
func TestDirInUse(t *testing.T) {
	dir := t.TempDir()
	e, err := Start(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if e2, err := Start(Config{Dir: dir}); err == nil {
		e2.Close()
		t.Fatal("a second member started on the same directory")
	} else if !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("the second member: %v", err)
	}
	e.Close()
	e, err = Start(Config{Dir: dir})
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	e.Close()
}

// TestClusterStateChecked: a cluster state other than etcd's two is
// refused before etcd starts, and leaves the directory free.
func TestClusterStateChecked(t *testing.T) {
	dir := t.TempDir()
	if e, err := Start(Config{Dir: dir, ClusterState: "joined"}); err == nil {
		e.Close()
		t.Fatal("started with cluster state joined")
	} else if !strings.Contains(err.Error(), `"joined" is neither "new" nor "existing"`) {
		t.Fatalf("cluster state joined: %v", err)
	}
	e, err := Start(Config{Dir: dir, ClusterState: "new"})
	if err != nil {
		t.Fatalf("after the refusal: %v", err)
	}
	e.Close()
}
