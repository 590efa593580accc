package nodelifecycle_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/controller/nodelifecycle"
)

// Short timings for tests on a real server and the real clock. Agents
// renew every testRenew, so a renewal may be late by up to 3.5 s (a
// stalled fsync or the race detector on a loaded 2-core machine, with
// the other packages' tests beside it) before a renewed node goes
// Unknown; at 2 s of grace one such stall of 1.7 s failed TestServer.
const (
	testPeriod = 200 * time.Millisecond
	testGrace  = 4 * time.Second
	testRenew  = testGrace / 8
)

// startController runs a lifecycle controller against the server until the
// test ends, recording Events through the API. With s, its feeds read
// the server's watch cache in process, as in leasehold serve; without, they
// list and watch through client.
func startController(t *testing.T, client kubernetes.Interface, s *apiservertest.Server) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(logWriter{t}, nil))
	cfg := nodelifecycle.Config{Client: client, MonitorPeriod: testPeriod, GracePeriod: testGrace, Logger: log}
	if s != nil {
		cfg.Reads = s.API.ListerWatcher
	}
	c, err := nodelifecycle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// createReadyNode creates a Node with Ready=True, as an agent registers one.
func createReadyNode(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	if err := createReadyNodeErr(client, name); err != nil {
		t.Fatal(err)
	}
}

func createReadyNodeErr(client kubernetes.Interface, name string) error {
	ctx := context.Background()
	n, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "TestAgentReady",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// nodeState is "Ready=<status>/<reason> taints=<unreachable effects>".
func nodeState(t *testing.T, client kubernetes.Interface, name string) string {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := "none"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = string(c.Status) + "/" + c.Reason
		}
	}
	var taints []string
	for _, tn := range n.Spec.Taints {
		if tn.Key == corev1.TaintNodeUnreachable {
			taints = append(taints, string(tn.Effect))
		}
	}
	return fmt.Sprintf("Ready=%s taints=%v", ready, taints)
}

const (
	stateUnreachable = "Ready=Unknown/NodeStatusUnknown taints=[NoSchedule NoExecute]"
	// stateAllUnreachable is a node's when no node is Ready: no NoExecute.
	stateAllUnreachable = "Ready=Unknown/NodeStatusUnknown taints=[NoSchedule]"
	stateRenewed        = "Ready=True/NodeLeaseRenewed taints=[]"
)

// eventually polls f until it returns "" or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stays checks f keeps returning "" for d.
func stays(t *testing.T, d time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if msg := f(); msg != "" {
			t.Fatal(msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wantState(t *testing.T, client kubernetes.Interface, name, want string) func() string {
	return func() string {
		if got := nodeState(t, client, name); got != want {
			return fmt.Sprintf("node %s: %s, want %s", name, got, want)
		}
		return ""
	}
}

// renewer renews a node lease every interval until stopped, as an agent.
func renewer(t *testing.T, client kubernetes.Interface, name string, interval time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	go func() {
		defer close(done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			}
			if err != nil && ctx.Err() == nil {
				t.Errorf("renewing lease %s: %v", name, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// nodeEvents lists the reasons of the Events about a node the way kubectl
// describe node finds them: by involvedObject with the node's name as uid.
func nodeEvents(t *testing.T, client kubernetes.Interface, name, uid string) []string {
	t.Helper()
	events := client.CoreV1().Events(metav1.NamespaceAll)
	ns, kind := "", "Node"
	list, err := events.List(context.Background(), metav1.ListOptions{
		FieldSelector: events.GetFieldSelector(&name, &ns, &kind, &uid).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(list.Items, func(a, b corev1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	var reasons []string
	for _, e := range list.Items {
		if e.ReportingController != nodelifecycle.ReportingController || e.Type != corev1.EventTypeNormal {
			t.Errorf("event %s from %q type %q, want from %q type Normal", e.Name, e.ReportingController, e.Type, nodelifecycle.ReportingController)
		}
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// wantEvents checks the controller's events about the node name whose uid
// is uid: they name it by its uid, as Kubernetes' node lifecycle
// controller's do.
func wantEvents(t *testing.T, client kubernetes.Interface, name, uid string, want ...string) func() string {
	return func() string {
		if got := nodeEvents(t, client, name, uid); !slices.Equal(got, want) {
			return fmt.Sprintf("events about %s: %v, want %v", name, got, want)
		}
		return ""
	}
}

// TestServer runs the controller against a real server, its feeds on
// the watch cache as in leasehold serve: a node whose lease is renewed stays
// Ready, goes Unknown with the unreachable taints once the renewals stop
// (NoExecute too, as web-2 is still Ready), and comes back when they
// resume.
func TestServer(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	client := s.Client(t, "")
	ctx := context.Background()
	for _, name := range []string{"web-1", "web-2"} {
		createReadyNode(t, client, name)
		if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](2),
				RenewTime: &metav1.MicroTime{Time: time.Now()},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	startController(t, client, s)
	renewer(t, client, "web-2", testRenew)

	web1, err := client.CoreV1().Nodes().Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(web1.UID)
	stop := renewer(t, client, "web-1", testRenew)
	stays(t, testGrace+testGrace/2, wantState(t, client, "web-1", "Ready=True/TestAgentReady taints=[]"))
	eventually(t, 10*time.Second, wantEvents(t, client, "web-1", uid, nodelifecycle.EventRegisteredNode))

	stop()
	eventually(t, testGrace+10*time.Second, wantState(t, client, "web-1", stateUnreachable))
	eventually(t, 10*time.Second, wantEvents(t, client, "web-1", uid, nodelifecycle.EventRegisteredNode, nodelifecycle.EventNodeNotReady))

	renewer(t, client, "web-1", testRenew)
	eventually(t, 10*time.Second, wantState(t, client, "web-1", stateRenewed))
	stays(t, testGrace+testGrace/2, wantState(t, client, "web-1", stateRenewed))
	eventually(t, 10*time.Second, wantEvents(t, client, "web-1", uid,
		nodelifecycle.EventRegisteredNode, nodelifecycle.EventNodeNotReady, nodelifecycle.EventNodeReady))

	if err := client.CoreV1().Nodes().Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, wantEvents(t, client, "web-1", uid,
		nodelifecycle.EventRegisteredNode, nodelifecycle.EventNodeNotReady, nodelifecycle.EventNodeReady, nodelifecycle.EventRemovingNode))
}

// TestKubeletLeaseController heartbeats with the kubelet's own code,
// k8s.io/component-helpers/apimachinery/lease, against leasehold: the
// lifecycle controller keeps that node Ready, and marks it unreachable once
// the heartbeats stop.
func TestKubeletLeaseController(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	client := s.Client(t, "application/vnd.kubernetes.protobuf")
	createReadyNode(t, client, "kubelet-1")
	startController(t, client, nil)

	// The owner reference the kubelet sets on its lease.
	setOwner := func(l *coordinationv1.Lease) error {
		if len(l.OwnerReferences) > 0 {
			return nil
		}
		n, err := client.CoreV1().Nodes().Get(context.Background(), "kubelet-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
		return nil
	}
	heartbeat := lease.NewController(clock.RealClock{}, client, "kubelet-1", 40, nil, testRenew, "kubelet-1", corev1.NamespaceNodeLease, setOwner)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { heartbeat.Run(ctx); close(done) }()
	stopHeartbeat := func() { cancel(); <-done }
	t.Cleanup(stopHeartbeat)

	eventually(t, 10*time.Second, func() string {
		l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), "kubelet-1", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if ptr.Deref(l.Spec.HolderIdentity, "") != "kubelet-1" || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Name != "kubelet-1" {
			return fmt.Sprintf("lease holder %v owners %v", l.Spec.HolderIdentity, l.OwnerReferences)
		}
		return ""
	})
	stays(t, testGrace+testGrace/2, wantState(t, client, "kubelet-1", "Ready=True/TestAgentReady taints=[]"))

	stopHeartbeat()
	eventually(t, testGrace+10*time.Second, wantState(t, client, "kubelet-1", stateAllUnreachable))
}

// TestServerNodesFromEtcd: with Nodes served from etcd, the controller's
// first list of them comes in pages (of 500) from the server's store; it
// learns of every node on every page, and marks each unreachable once its
// grace period passes without a lease.
func TestServerNodesFromEtcd(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{WatchCacheSizes: map[schema.GroupResource]int{{Resource: "nodes"}: 0}})
	client := s.Client(t, "")
	const nodes = 1001 // three pages
	// Eight writers at a time, whose errors the test's own goroutine
	// reports.
	errs := make(chan error, nodes)
	workqueue.ParallelizeUntil(context.Background(), 8, nodes, func(i int) {
		if err := createReadyNodeErr(client, fmt.Sprintf("paged-%04d", i)); err != nil {
			errs <- err
		}
	})
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	startController(t, client, s)
	// Marking takes two writes and an event a node: about 30 nodes a
	// second with the race detector on a loaded 2-core machine, 1001
	// nodes in over 30 s. Waiting longer costs a passing run nothing.
	eventually(t, testGrace+90*time.Second, func() string {
		list, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		var left []string
		for _, n := range list.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionUnknown {
					left = append(left, n.Name)
				}
			}
		}
		if len(list.Items) != nodes || len(left) > 0 {
			return fmt.Sprintf("%d nodes, %d not yet Unknown (%v)", len(list.Items), len(left), left[:min(len(left), 3)])
		}
		return ""
	})
	// The last page's node, as a user sees it.
	eventually(t, 10*time.Second, wantState(t, client, fmt.Sprintf("paged-%04d", nodes-1), stateAllUnreachable))
}
