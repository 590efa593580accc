package embedded

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSnapshotRestore: a snapshot streamed from a running member verifies
// and restores into a member that holds what the snapshot held, at a
// revision moved on by RestoreRevisionBump with the ones before it
// compacted; a damaged or cut snapshot is refused, and so is a directory
// that exists.
func TestSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e, err := Start(Config{Dir: filepath.Join(dir, "a")})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"/registry/leases/default/a", "/registry/leases/default/b"} {
		if _, err := e.Client().Put(ctx, k, "v:"+k); err != nil {
			t.Fatal(err)
		}
	}
	taken, err := e.Client().Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	// A reader closed part way ends the stream.
	rc, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	// So does the end of its context.
	cctx, cancel := context.WithCancel(ctx)
	if rc, err = e.Snapshot(cctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.Copy(io.Discard, rc); !errors.Is(err, context.Canceled) {
		t.Errorf("reading a snapshot whose context ended: %v; want %v", err, context.Canceled)
	}
	rc.Close()
	// The member's own stream, which the server serves, is what etcd's
	// call streams: the database, then its SHA-256.
	path := filepath.Join(dir, "snap.db")
	saveSnapshot(t, e, path)
	// Written after the snapshot: not in the restored member.
	if _, err := e.Client().Put(ctx, "/registry/leases/default/later", "x"); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if _, err := VerifySnapshot(path); err != nil {
		t.Fatalf("VerifySnapshot: %v", err)
	}
	if rev, err := SnapshotRevision(path); err != nil || rev != taken.Header.Revision {
		t.Fatalf("SnapshotRevision: %d, %v; want %d", rev, err, taken.Header.Revision)
	}

	log := slog.New(slog.DiscardHandler)
	restored := filepath.Join(dir, "b")
	if err := Restore(path, restored, RestoreMember{}, log); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if err := Restore(path, restored, RestoreMember{}, log); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second Restore into the same directory: %v; want it refused", err)
	}
	e, err = Start(Config{Dir: restored})
	if err != nil {
		t.Fatalf("starting the restored member: %v", err)
	}
	defer e.Close()
	got, err := e.Client().Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != len(taken.Kvs) {
		t.Fatalf("the restored member holds %d keys; want the snapshot's %d", len(got.Kvs), len(taken.Kvs))
	}
	for i, kv := range got.Kvs {
		if string(kv.Key) != string(taken.Kvs[i].Key) || string(kv.Value) != string(taken.Kvs[i].Value) {
			t.Errorf("key %d: %s=%s; want %s=%s", i, kv.Key, kv.Value, taken.Kvs[i].Key, taken.Kvs[i].Value)
		}
	}
	if got.Header.Revision < taken.Header.Revision+RestoreRevisionBump {
		t.Errorf("the restored revision %d; want at least %d", got.Header.Revision, taken.Header.Revision+RestoreRevisionBump)
	}
	_, err = e.Client().Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(taken.Header.Revision))
	if !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("a read at the snapshot's revision after the restore: %v; want it compacted", err)
	}

	// A snapshot cut short, and one with a byte changed.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"cut":     data[:len(data)-100],
		"changed": append(append([]byte{}, data[:100]...), append([]byte{data[100] ^ 1}, data[101:]...)...),
	} {
		p := filepath.Join(dir, name+".db")
		if err := os.WriteFile(p, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Restore(p, filepath.Join(dir, name), RestoreMember{}, log); err == nil {
			t.Errorf("a %s snapshot was restored", name)
		}
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused %s snapshot left its directory: %v", name, err)
		}
	}

	// A named member of a cluster the list describes: started with that
	// name and list, it holds the snapshot's keys. A name the list lacks
	// is refused.
	peer := loopbackURL(t)
	m := RestoreMember{Name: "m1", InitialCluster: "m1=" + peer.String()}
	if err := Restore(path, filepath.Join(dir, "other"), RestoreMember{Name: "m2", InitialCluster: m.InitialCluster}, log); err == nil || !strings.Contains(err.Error(), "names no member m2") {
		t.Errorf("restoring a member the cluster does not name: %v", err)
	}
	named := filepath.Join(dir, "m1")
	if err := Restore(path, named, m, log); err != nil {
		t.Fatalf("Restore as m1: %v", err)
	}
	m1, err := Start(Config{Dir: named, Name: m.Name, InitialCluster: m.InitialCluster, PeerURLs: []url.URL{peer}})
	if err != nil {
		t.Fatalf("starting the restored m1: %v", err)
	}
	defer m1.Close()
	if got, err := m1.Client().Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || got.Count != int64(len(taken.Kvs)) {
		t.Errorf("m1 holds %v keys (%v); want the snapshot's %d", got, err, len(taken.Kvs))
	}
	if members, err := m1.Client().MemberList(ctx); err != nil || len(members.Members) != 1 || members.Members[0].Name != "m1" {
		t.Errorf("m1's members: %v, %v", members, err)
	}
}

// FuzzVerifySnapshot: any file gets an answer, never a panic, and one it
// accepts is a whole number of 512-byte pages followed by their SHA-256.
func FuzzVerifySnapshot(f *testing.F) {
	page := make([]byte, 512)
	sum := sha256.Sum256(page)
	f.Add(append(append([]byte{}, page...), sum[:]...))
	f.Add(page)
	f.Add([]byte{})
	f.Add(sum[:])
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "snap.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		size, err := VerifySnapshot(path)
		if err != nil {
			return
		}
		if size != int64(len(data))-sha256.Size || size%512 != 0 || size == 0 {
			t.Fatalf("accepted %d bytes as a database of %d", len(data), size)
		}
		if got := sha256.Sum256(data[:size]); !bytes.Equal(got[:], data[size:]) {
			t.Fatal("accepted a file whose checksum does not match")
		}
	})
}

// TestSnapshotOfAnEmptyMember: a member that was never written to (a new
// cluster before any server) gives a snapshot of revision 0, as etcdutl's
// status reports it, which restores into a member that starts.
func TestSnapshotOfAnEmptyMember(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e, err := Start(Config{Dir: filepath.Join(dir, "a")})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "snap.db")
	saveSnapshot(t, e, path)
	e.Close()
	if _, err := VerifySnapshot(path); err != nil {
		t.Fatalf("VerifySnapshot: %v", err)
	}
	if rev, err := SnapshotRevision(path); err != nil || rev != 0 {
		t.Fatalf("SnapshotRevision: %d, %v; want 0", rev, err)
	}
	restored := filepath.Join(dir, "b")
	if err := Restore(path, restored, RestoreMember{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	e, err = Start(Config{Dir: restored})
	if err != nil {
		t.Fatalf("starting the restored member: %v", err)
	}
	defer e.Close()
	if _, err := e.Client().Put(ctx, "/registry/leases/default/a", "v"); err != nil {
		t.Errorf("writing to the restored member: %v", err)
	}
}

// saveSnapshot writes e's snapshot stream to path.
func saveSnapshot(t *testing.T, e *Etcd, path string) {
	t.Helper()
	rc, err := e.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
}
