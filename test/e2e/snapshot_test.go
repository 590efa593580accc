package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
)

// TestSnapshotSaveRestore: `leasehold snapshot save` writes etcd's
// snapshot of a running server for a cluster-admin and for nobody else;
// `leasehold snapshot restore` puts it back into a stopped server's data
// directory, which then serves what the snapshot held, and watches from
// revisions seen after it get 410 Gone.
func TestSnapshotSaveRestore(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	s := newServer(t)
	ctx := context.Background()
	leases := s.clientset(t).CoordinationV1().Leases("default")
	l, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "snap"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("before")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "leasehold.db")
	out := leasehold(t, "snapshot", "save", "--kubeconfig", s.kubeconfig, file)
	if !strings.Contains(out, "Snapshot saved at "+file) {
		t.Errorf("snapshot save printed %q", out)
	}

	// Not for a user who is no cluster-admin: 403, and no file.
	kc := filepath.Join(dir, "alice.kubeconfig")
	leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", "alice", "--kubeconfig-out", kc)
	denied := filepath.Join(dir, "alice.db")
	cmd := exec.Command(leaseholdBin, "snapshot", "save", "--kubeconfig", kc, denied)
	if msg, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(msg), `cannot get path "/etcd/snapshot"`) {
		t.Errorf("snapshot save as alice: %v\n%s", err, msg)
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*alice.db*")); len(entries) != 0 {
		t.Errorf("a refused save left %v", entries)
	}
	// A method other than GET: 405 with a Status.
	err = s.clientset(t).CoreV1().RESTClient().Post().AbsPath("/etcd/snapshot").Do(ctx).Error()
	if !apierrors.IsMethodNotSupported(err) {
		t.Errorf("POST /etcd/snapshot: %v; want 405", err)
	}

	l.Spec.HolderIdentity = ptr.To("after")
	after, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	member := filepath.Join(s.dataDir, "etcd")
	if _, err := exec.Command(leaseholdBin, "snapshot", "restore", "--data-dir", s.dataDir, file).CombinedOutput(); err == nil {
		t.Fatal("a restore over the data directory's etcd was not refused")
	}
	if err := os.Rename(member, filepath.Join(dir, "etcd.old")); err != nil {
		t.Fatal(err)
	}
	leasehold(t, "snapshot", "restore", "--data-dir", s.dataDir, file)

	s = serveFor(t, s.dataDir, s.listen, filepath.Dir(s.logPath))
	leases = s.clientset(t).CoordinationV1().Leases("default")
	got, err := leases.Get(ctx, "snap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(got.Spec.HolderIdentity, ""); h != "before" {
		t.Errorf("the restored lease's holder: %q; want the snapshot's, before", h)
	}
	watchGone(t, leases, after.ResourceVersion)
}

// watchGone fails the test unless a watch of leases from resourceVersion
// gets 410 Gone, as it does from a revision that a restore skipped.
func watchGone(t *testing.T, leases coordinationclient.LeaseInterface, resourceVersion string) {
	t.Helper()
	w, err := leases.Watch(context.Background(), metav1.ListOptions{ResourceVersion: resourceVersion})
	if err == nil {
		ev := <-w.ResultChan()
		w.Stop()
		if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || st.Code != http.StatusGone {
			t.Errorf("a watch from a revision seen after the snapshot: %s %v; want 410 Gone", ev.Type, ev.Object)
		}
	} else if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("a watch from a revision seen after the snapshot: %v; want 410 Gone", err)
	}
}

// TestScheduledSnapshots: with --etcd-snapshot-interval the server takes
// snapshots on its own into DATA_DIR/snapshots and keeps the newest
// --etcd-snapshot-retention of them; /metrics says when it last took one;
// the newest restores into a server that serves what it held.
func TestScheduledSnapshots(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	s := newServer(t, "--etcd-snapshot-interval", "1s", "--etcd-snapshot-retention", "2")
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseManifest("scheduled", ns, "kept"), "create", "-f", "-")
	created := time.Now()
	dir := filepath.Join(s.dataDir, "snapshots")
	// The server goes on taking a snapshot a second and removing the
	// oldest, so the newest is copied away as soon as it is seen.
	kept := filepath.Join(t.TempDir(), "newest.db")
	eventually(t, time.Minute, func() error {
		files, err := filepath.Glob(filepath.Join(dir, "leasehold-snapshot-*.db"))
		if err != nil {
			return err
		}
		log, _ := os.ReadFile(s.logPath)
		newest := ""
		if len(files) > 0 {
			newest = files[len(files)-1]
		}
		// Two kept, one at least removed, and the newest taken after the
		// Lease was created (a second after: names are to the second).
		if len(files) != 2 || !strings.Contains(string(log), "etcd snapshot removed beyond the retention") ||
			newest < filepath.Join(dir, "leasehold-snapshot-"+created.Add(time.Second).UTC().Format("20060102T150405Z")+".db") {
			return fmt.Errorf("snapshots %q", files)
		}
		b, err := os.ReadFile(newest)
		if err != nil {
			return err // removed beyond the retention since the glob
		}
		return os.WriteFile(kept, b, 0o600)
	})
	if out := s.kubectl(t, "get", "--raw", "/metrics"); !regexp.MustCompile(`(?m)^leasehold_etcd_snapshot_last_success_timestamp_seconds [1-9]`).MatchString(out) {
		t.Errorf("/metrics has no time of the last snapshot:\n%s", grepLines(out, "snapshot"))
	}

	restored := filepath.Join(t.TempDir(), "data")
	leasehold(t, "snapshot", "restore", "--data-dir", restored, kept)
	r := serveFor(t, restored, "", filepath.Dir(restored))
	if got := holder(getLease(t, r, ns, "scheduled")); got != "kept" {
		t.Errorf("the restored lease's holder %q, want kept", got)
	}
}
