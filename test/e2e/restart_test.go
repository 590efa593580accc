package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// ackedWrite is a write the server acknowledged: the resourceVersion it
// returned and the holder it wrote.
type ackedWrite struct {
	rv     int64
	holder string
}

// writeLog is what one writer knows about one lease. Only the lease's own
// writer touches it until the writers have finished.
type writeLog struct {
	acked   *ackedWrite           // the last acknowledged write; nil if none
	pending string                // holder of a write sent but not acknowledged; "" if none
	obj     *coordinationv1.Lease // the object the last acknowledged write returned
	writes  int                   // acknowledged writes
}

// TestKill9KeepsAcknowledgedWrites writes leases from many goroutines
// through client-go, kills the server with SIGKILL right after an
// acknowledgement while other writes are still in flight, starts it again on
// the same data directory, and checks that every acknowledged write is
// there.
func TestKill9KeepsAcknowledgedWrites(t *testing.T) {
	t.Parallel()
	const (
		leases  = 200
		writers = 16
		target  = 3 * leases // acknowledgements before the kill: a create and two updates per lease on average
		ns      = "default"
	)
	s := newServer(t)
	cs := s.clientset(t)
	ctx := context.Background()

	logs := make([]writeLog, leases)
	var (
		acks     atomic.Int64
		stop     atomic.Bool
		errMu    sync.Mutex
		early    []error // failures before the kill: real errors
		wg       sync.WaitGroup
		killedAt time.Time
	)
	name := func(i int) string { return fmt.Sprintf("kill9-%03d", i) }
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; ; round++ {
				for i := w; i < leases; i += writers {
					if stop.Load() {
						return
					}
					lg := &logs[i]
					h := fmt.Sprintf("w%d-r%d", w, round)
					lg.pending = h
					var got *coordinationv1.Lease
					var err error
					if lg.obj == nil {
						got, err = cs.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
							ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: ns},
							Spec:       coordinationv1.LeaseSpec{HolderIdentity: &h},
						}, metav1.CreateOptions{})
					} else {
						obj := lg.obj.DeepCopy()
						obj.Spec.HolderIdentity = &h
						got, err = cs.CoordinationV1().Leases(ns).Update(ctx, obj, metav1.UpdateOptions{})
					}
					if err != nil {
						if !stop.Load() {
							errMu.Lock()
							early = append(early, fmt.Errorf("writing %s (holder %s): %w", name(i), h, err))
							errMu.Unlock()
						}
						return // the write stays pending: it may or may not have been stored
					}
					rv, perr := strconv.ParseInt(got.ResourceVersion, 10, 64)
					if perr != nil || holder(got) != h {
						errMu.Lock()
						early = append(early, fmt.Errorf("writing %s: the server answered rv %q holder %q, want a number and %q", name(i), got.ResourceVersion, holder(got), h))
						errMu.Unlock()
						return
					}
					lg.pending, lg.obj, lg.acked = "", got, &ackedWrite{rv: rv, holder: h}
					lg.writes++
					if acks.Add(1) == target {
						// Right after this acknowledgement, with the other
						// writers' requests in flight.
						stop.Store(true)
						killedAt = time.Now()
						if err := s.sigkill(); err != nil {
							errMu.Lock()
							early = append(early, fmt.Errorf("kill -9: %w", err))
							errMu.Unlock()
						}
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range early {
		t.Error(err)
	}
	if !stop.Load() {
		t.Fatalf("the writers stopped after %d acknowledged writes, before the kill at %d", acks.Load(), target)
	}
	<-s.exited
	var inFlight int
	var maxAcked int64
	for i := range logs {
		if logs[i].pending != "" {
			inFlight++
		}
		if a := logs[i].acked; a != nil && a.rv > maxAcked {
			maxAcked = a.rv
		}
	}
	t.Logf("%d acknowledged writes (%d more acknowledged in the race with the kill) in %v; %d writes in flight at kill -9",
		target, acks.Load()-target, killedAt.Sub(start).Round(time.Millisecond), inFlight)

	s2 := s.restart(t)
	cs2 := s2.clientset(t)
	// Read straight from etcd (a limit makes the list skip the watch cache).
	list, err := cs2.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatalf("listing leases after the restart: %v", err)
	}
	if list.Continue != "" {
		t.Fatalf("more than 1000 leases after the restart")
	}
	stored := map[string]coordinationv1.Lease{}
	for _, l := range list.Items {
		stored[l.Name] = l
	}
	var lost, stale int
	for i := range logs {
		lg := &logs[i]
		l, ok := stored[name(i)]
		if lg.acked == nil {
			if ok && (lg.pending == "" || holder(&l) != lg.pending) {
				t.Errorf("%s: never acknowledged, yet stored with holder %q (the only write sent had %q)", name(i), holder(&l), lg.pending)
			}
			continue
		}
		if !ok {
			lost++
			t.Errorf("%s: lost; %d writes were acknowledged, the last at rv %d holder %q", name(i), lg.writes, lg.acked.rv, lg.acked.holder)
			continue
		}
		rv, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
		if err != nil {
			t.Errorf("%s: resourceVersion %q after restart", name(i), l.ResourceVersion)
			continue
		}
		switch h := holder(&l); {
		case h == lg.acked.holder && rv == lg.acked.rv:
		case h == lg.acked.holder && rv != lg.acked.rv:
			stale++
			t.Errorf("%s: holder %q as acknowledged, but rv %d, want the acknowledged %d", name(i), h, rv, lg.acked.rv)
		case lg.pending != "" && h == lg.pending && rv > lg.acked.rv:
			// The write in flight at the kill made it; that is allowed.
		default:
			stale++
			t.Errorf("%s: after restart holder %q rv %d; acknowledged holder %q rv %d (in flight: %q)", name(i), h, rv, lg.acked.holder, lg.acked.rv, lg.pending)
		}
	}
	if lost+stale > 0 {
		t.Errorf("%d acknowledged leases lost, %d rolled back by kill -9", lost, stale)
	}

	// The server takes writes again, and revisions keep growing.
	for i := range logs {
		if logs[i].obj == nil {
			continue
		}
		cur := stored[name(i)]
		h := "after-restart"
		cur.Spec.HolderIdentity = &h
		got, err := cs2.CoordinationV1().Leases(ns).Update(ctx, &cur, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("update after the restart: %v", err)
		}
		if rv, _ := strconv.ParseInt(got.ResourceVersion, 10, 64); rv <= maxAcked {
			t.Errorf("first write after the restart got rv %d, not above the highest acknowledged %d", rv, maxAcked)
		}
		break
	}
}

// TestGracefulShutdown sends SIGTERM to a server with open watches: it exits
// 0 within seconds, the watches end cleanly, and a second start on the same
// data directory keeps the CA, the credentials and the data, so the old
// admin.kubeconfig still works.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	s := newServer(t)

	// A fresh server has no leases in default (kube-system holds the
	// server's own).
	out, errOut, err := s.runKubectl(t, "get", "lease")
	if err != nil || out != "" || strings.TrimSpace(errOut) != "No resources found in default namespace." {
		t.Errorf("kubectl get lease on a fresh server: err %v, stdout %q, stderr %q; want \"No resources found in default namespace.\"", err, out, errOut)
	}
	s.kubectlStdin(t, leaseManifest("g", "default", "a"), "apply", "-f", "-")

	files := map[string][]byte{}
	for _, f := range []string{"ca.crt", "ca.key", "serving.crt", "admin.kubeconfig", "admin-token.sha256"} {
		data, err := os.ReadFile(filepath.Join(s.dataDir, f))
		if err != nil {
			t.Fatalf("after the first start: %v", err)
		}
		files[f] = data
	}

	w := s.startKubectl(t, "get", "lease", "-n", "default", "-w")
	w.waitLine(t, time.Minute, "the lease g", func(f []string) bool { return len(f) == 3 && f[0] == "g" && f[1] == "a" })
	cs := s.clientset(t)
	cur, err := cs.CoordinationV1().Leases("default").Get(context.Background(), "g", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wi, err := cs.CoordinationV1().Leases("default").Watch(context.Background(), metav1.ListOptions{ResourceVersion: cur.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Stop()

	sent := time.Now()
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
		t.Logf("leasehold serve exited %v after SIGTERM with two watches open", time.Since(sent).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatalf("leasehold serve still running 20s after SIGTERM with watches open")
	}
	if s.err != nil {
		t.Errorf("leasehold serve exit after SIGTERM: %v, want status 0", s.err)
	}
	if strings.Contains(readFile(t, s.logPath), "panic") {
		t.Errorf("the server log mentions a panic:\n%s", s.logTail())
	}

	// kubectl's watch ends by itself, successfully.
	if err := w.wait(t, 20*time.Second); err != nil {
		t.Errorf("kubectl get -w after the server's shutdown: %v, want exit 0; stderr:\n%s", err, w.stderr.String())
	}
	// client-go's watch channel closes without an error event.
	timeout := time.After(20 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-wi.ResultChan():
			if !ok {
				done = true
				break
			}
			if ev.Type == watch.Error {
				t.Errorf("client-go watch got an error event at shutdown: %+v", ev.Object)
			}
		case <-timeout:
			t.Fatal("client-go watch still open 20s after the server exited")
		}
	}

	s2 := s.restart(t)
	for f, before := range files {
		after, err := os.ReadFile(filepath.Join(s2.dataDir, f))
		if err != nil {
			t.Errorf("after the restart: %v", err)
			continue
		}
		if !bytes.Equal(before, after) {
			t.Errorf("%s changed across a restart; it must be reused", f)
		}
	}
	// The old admin.kubeconfig (unchanged, as checked above) still works, and
	// the data is there.
	if got := s2.kubectl(t, "get", "lease", "g", "-n", "default", "-o", "jsonpath={.spec.holderIdentity}"); got != "a" {
		t.Errorf("after the restart holder = %q, want a", got)
	}
	header, rows := tableRows(t, s2.kubectl(t, "get", "ns"))
	if len(header) == 0 || len(rows) != 4 {
		t.Errorf("after the restart kubectl get ns shows %d namespaces, want the 4 built-in ones once each", len(rows))
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
