package garbagecollector

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/leakcheck"
	"github.com/leasehold/leasehold/internal/registry"
)

// TestMain fails the package if a test leaves collector goroutines behind.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(m, "garbagecollector.(*GarbageCollector)"))
}

// env is a server with garbage collection and a running collector.
type env struct {
	t  *testing.T
	gc *GarbageCollector
	c  kubernetes.Interface
}

// start runs the collector as leasehold serve does, reading the server's
// watch cache in process, with only the changes it looks at.
func start(t *testing.T) *env { return startWith(t, true) }

// startWith runs the collector on the in-process reads, or else on the
// metadata client, as a collector outside the server would.
func startWith(t *testing.T, inProcess bool) *env {
	t.Helper()
	srv := apiservertest.Start(t, apiservertest.Options{GarbageCollection: true})
	cfg := Config{REST: srv.Config, Logger: testLogger(t)}
	if inProcess {
		cfg.Reads = func(gvr schema.GroupVersionResource, namespace string) (cache.ListerWatcher, error) {
			return srv.API.ListerWatcherWith(gvr, namespace, apiserver.OnlyChanges(Changed))
		}
	}
	gc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gc.Run(ctx) }()
	// Registered after Start's cleanup, so this runs first: the collector
	// stops before the server does.
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-gc.synced:
	case err := <-done:
		t.Fatalf("Run ended before its caches synced: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("collector caches did not sync")
	}
	return &env{t: t, gc: gc, c: srv.Client(t, "")}
}

// eventually polls cond until it holds or the deadline passes.
func (e *env) eventually(within time.Duration, what string, cond func() (bool, error)) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %v (last error: %v)", what, within, last)
		}
		<-tick.C
	}
}

func ownerRef(apiVersion, kind string, m metav1.Object, block bool) metav1.OwnerReference {
	r := metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: m.GetName(), UID: m.GetUID()}
	if block {
		r.BlockOwnerDeletion = ptr.To(true)
	}
	return r
}

func nodeRef(n *corev1.Node, block bool) metav1.OwnerReference {
	return ownerRef("v1", "Node", n, block)
}

func leaseRef(l *coordinationv1.Lease, block bool) metav1.OwnerReference {
	return ownerRef("coordination.k8s.io/v1", "Lease", l, block)
}

func (e *env) node(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.c.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) namespace(name string, owners ...metav1.OwnerReference) *corev1.Namespace {
	e.t.Helper()
	ns, err := e.c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return ns
}

func (e *env) lease(ns, name string, finalizers []string, owners ...metav1.OwnerReference) *coordinationv1.Lease {
	e.t.Helper()
	l, err := e.c.CoordinationV1().Leases(ns).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners, Finalizers: finalizers},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40)},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// observed waits until the collector's graph holds each of objs. An
// owner deleted with the Orphan policy before the collector has seen a
// dependent leaves that dependent to be seen later with its owner gone,
// and collected, as in Kubernetes.
func (e *env) observed(objs ...metav1.Object) {
	e.t.Helper()
	e.eventually(5*time.Second, "objects in the collector's graph", func() (bool, error) {
		for _, o := range objs {
			if v, ok := e.gc.graph.view(o.GetUID()); !ok || v.virtual {
				return false, nil
			}
		}
		return true, nil
	})
}

func (e *env) getLease(ns, name string) (*coordinationv1.Lease, error) {
	return e.c.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
}

// gone reports whether get finds nothing.
func gone(get func() error) func() (bool, error) {
	return func() (bool, error) {
		err := get()
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
}

func (e *env) leaseGone(ns, name string) func() (bool, error) {
	return gone(func() error { _, err := e.getLease(ns, name); return err })
}

func (e *env) nodeGone(name string) func() (bool, error) {
	return gone(func() error {
		_, err := e.c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		return err
	})
}

func (e *env) namespaceGone(name string) func() (bool, error) {
	return gone(func() error {
		_, err := e.c.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
		return err
	})
}

func ownerUIDs(m metav1.Object) []types.UID {
	var out []types.UID
	for _, r := range m.GetOwnerReferences() {
		out = append(out, r.UID)
	}
	return out
}

// value reads a counter.

// TestNodeLease is the node heartbeat case: a node's Lease names its Node as
// owner, as the agent and the kubelet create it, and goes with it.
func TestNodeLease(t *testing.T) {
	t.Run("in-process", func(t *testing.T) { testNodeLease(t, startWith(t, true)) })
	t.Run("metadata-client", func(t *testing.T) { testNodeLease(t, startWith(t, false)) })
}

func testNodeLease(t *testing.T, e *env) {
	ctx := context.Background()
	n := e.node("web-1")
	e.lease("kube-node-lease", "web-1", nil, nodeRef(n, false))

	if err := e.c.CoreV1().Nodes().Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(2*time.Second, "node lease collected", e.leaseGone("kube-node-lease", "web-1"))
	// The collector counts a deletion once the server has answered it, a
	// moment after the lease is gone.
	e.eventually(2*time.Second, "the deletion counted", func() (bool, error) {
		return testutil.ToFloat64(e.gc.deletions) == 1, nil
	})
}

// TestBackground deletes an owner with the default policy: dependents of
// both scopes go, and one that has another live owner stays without the
// reference to the deleted one.
func TestBackground(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	owner := e.node("bg-owner")
	keeper := e.lease("default", "bg-keeper", nil)
	e.lease("kube-node-lease", "bg-a", nil, nodeRef(owner, false))
	e.lease("default", "bg-b", nil, nodeRef(owner, true))
	e.namespace("bg-ns", nodeRef(owner, false))
	e.lease("default", "bg-shared", nil, nodeRef(owner, false), leaseRef(keeper, false))

	if err := e.c.CoreV1().Nodes().Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	e.eventually(5*time.Second, "bg-a collected", e.leaseGone("kube-node-lease", "bg-a"))
	e.eventually(5*time.Second, "bg-b collected", e.leaseGone("default", "bg-b"))
	e.eventually(10*time.Second, "bg-ns collected", e.namespaceGone("bg-ns"))
	e.eventually(5*time.Second, "bg-shared loses its reference to the node", func() (bool, error) {
		l, err := e.getLease("default", "bg-shared")
		if err != nil {
			return false, err
		}
		return slices.Equal(ownerUIDs(l), []types.UID{keeper.UID}), fmt.Errorf("owners %v", ownerUIDs(l))
	})
}

// TestForeground deletes an owner in the foreground: it stays, marked
// deleted, until no dependent that blocks it is left, then goes. A blocking
// dependent with dependents of its own is deleted in the foreground too.
func TestForeground(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	const hold = "example.com/hold"
	owner := e.node("fg-owner")
	e.lease("default", "fg-held", []string{hold}, nodeRef(owner, true))
	mid := e.lease("kube-system", "fg-mid", nil, nodeRef(owner, true))
	e.lease("kube-system", "fg-child", nil, leaseRef(mid, true))
	e.lease("default", "fg-free", nil, nodeRef(owner, false))

	if err := e.c.CoreV1().Nodes().Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	e.eventually(5*time.Second, "fg-free collected", e.leaseGone("default", "fg-free"))
	e.eventually(5*time.Second, "fg-child collected", e.leaseGone("kube-system", "fg-child"))
	e.eventually(5*time.Second, "fg-mid collected", e.leaseGone("kube-system", "fg-mid"))
	e.eventually(5*time.Second, "fg-held marked deleted", func() (bool, error) {
		l, err := e.getLease("default", "fg-held")
		return err == nil && l.DeletionTimestamp != nil, err
	})
	// fg-held still exists and blocks: the owner waits.
	n, err := e.c.CoreV1().Nodes().Get(ctx, owner.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("owner gone while a blocking dependent remains: %v", err)
	}
	if n.DeletionTimestamp == nil || !slices.Contains(n.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("owner deletionTimestamp %v finalizers %v, want deleted with %s", n.DeletionTimestamp, n.Finalizers, metav1.FinalizerDeleteDependents)
	}

	// Releasing the last blocker releases the owner.
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := e.c.CoordinationV1().Leases("default").Patch(ctx, "fg-held", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(5*time.Second, "fg-held gone", e.leaseGone("default", "fg-held"))
	e.eventually(5*time.Second, "owner gone", e.nodeGone(owner.Name))
}

// TestForegroundWithoutDependents: the finalizer goes at once.
func TestForegroundWithoutDependents(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	e.lease("default", "alone", nil)
	if err := e.c.CoordinationV1().Leases("default").Delete(ctx, "alone", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	e.eventually(5*time.Second, "lease gone", e.leaseGone("default", "alone"))
}

// TestOrphan deletes an owner with the Orphan policy: the owner goes, its
// dependents stay without their references to it, other references kept.
func TestOrphan(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	owner := e.node("or-owner")
	keeper := e.lease("kube-system", "or-keeper", nil)
	a := e.lease("default", "or-a", nil, nodeRef(owner, true))
	b := e.lease("kube-system", "or-b", nil, leaseRef(keeper, false), nodeRef(owner, false))
	ns := e.namespace("or-ns", nodeRef(owner, false))
	e.observed(a, b, ns)

	if err := e.c.CoreV1().Nodes().Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatal(err)
	}
	e.eventually(5*time.Second, "owner gone", e.nodeGone(owner.Name))
	a, err := e.getLease("default", "or-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err = e.getLease("kube-system", "or-b")
	if err != nil {
		t.Fatal(err)
	}
	ns, err = e.c.CoreV1().Namespaces().Get(ctx, "or-ns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ownerUIDs(a); len(got) != 0 {
		t.Errorf("or-a owners %v, want none", got)
	}
	if got, want := ownerUIDs(b), []types.UID{keeper.UID}; !slices.Equal(got, want) {
		t.Errorf("or-b owners %v, want %v", got, want)
	}
	if got := ownerUIDs(ns); len(got) != 0 {
		t.Errorf("or-ns owners %v, want none", got)
	}
	if ns.DeletionTimestamp != nil {
		t.Error("or-ns is being deleted")
	}
	e.eventually(2*time.Second, "three orphanings counted", func() (bool, error) {
		return testutil.ToFloat64(e.gc.orphanings) == 3, nil
	})
	if got := testutil.ToFloat64(e.gc.deletions); got != 0 {
		t.Errorf("deletions metric %v, want 0", got)
	}
}

// TestMissingOwner: dependents naming an owner that does not exist (a uid
// never seen, a replaced owner, an owner in another namespace) are
// collected; a dependent of a live owner stays.
func TestMissingOwner(t *testing.T) {
	e := start(t)
	ctx := context.Background()

	ghost := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ghost", UID: uuid.NewUUID()}}
	e.lease("default", "of-ghost", nil, nodeRef(ghost, false))

	old := e.node("replaced")
	if err := e.c.CoreV1().Nodes().Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(5*time.Second, "old node gone", e.nodeGone(old.Name))
	cur := e.node("replaced")
	e.lease("default", "of-old", nil, nodeRef(old, false))
	e.lease("default", "of-current", nil, nodeRef(cur, false))

	elsewhere := e.lease("kube-system", "owner-elsewhere", nil)
	e.lease("default", "of-elsewhere", nil, leaseRef(elsewhere, false))

	e.eventually(2*time.Second, "dependent of a uid never seen collected", e.leaseGone("default", "of-ghost"))
	e.eventually(2*time.Second, "dependent of a replaced owner collected", e.leaseGone("default", "of-old"))
	e.eventually(2*time.Second, "dependent of an owner in another namespace collected", e.leaseGone("default", "of-elsewhere"))
	for _, name := range []string{"of-current"} {
		if _, err := e.getLease("default", name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := e.getLease("kube-system", "owner-elsewhere"); err != nil {
		t.Errorf("owner-elsewhere: %v", err)
	}
	// As Kubernetes' collector, it says why with a Warning on the
	// dependent.
	e.invalidNamespaceEvent("default", "Lease", "of-elsewhere",
		fmt.Sprintf(`ownerRef [coordination.k8s.io/v1/Lease, namespace: default, name: owner-elsewhere, uid: %s] does not exist in namespace "default"`, elsewhere.UID))
}

// invalidNamespaceEvent waits for the collector's OwnerRefInvalidNamespace
// Event on the object kind/name, in namespace, with message.
func (e *env) invalidNamespaceEvent(namespace, kind, name, message string) {
	e.t.Helper()
	e.eventually(5*time.Second, "an OwnerRefInvalidNamespace event on "+name, func() (bool, error) {
		list, err := e.c.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=OwnerRefInvalidNamespace"})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name {
				if ev.Type != corev1.EventTypeWarning || ev.Message != message || ev.Source.Component != EventComponent || ev.ReportingController != EventComponent {
					return false, fmt.Errorf("event %+v; want a Warning from %s saying %q", ev, EventComponent, message)
				}
				return true, nil
			}
		}
		return false, fmt.Errorf("none among %d events", len(list.Items))
	})
}

// TestUnresolvableOwner: a cluster-scoped object naming a namespaced owner,
// and an object naming a kind leasehold does not serve, are left alone.
func TestUnresolvableOwner(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	owner := e.lease("default", "ns-owner", nil)
	e.namespace("names-namespaced-owner", leaseRef(owner, true))
	e.lease("default", "names-unknown-kind", nil, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: uuid.NewUUID()})
	// A dependent created after them with a missing owner marks when the
	// collector has had its look at them.
	e.lease("default", "witness", nil, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "none", UID: uuid.NewUUID()})
	e.eventually(5*time.Second, "witness collected", e.leaseGone("default", "witness"))

	ns, err := e.c.CoreV1().Namespaces().Get(ctx, "names-namespaced-owner", metav1.GetOptions{})
	if err != nil || ns.DeletionTimestamp != nil || len(ns.OwnerReferences) != 1 {
		t.Errorf("namespace naming a namespaced owner: %v, %+v; want it untouched", err, ns.ObjectMeta)
	}
	if l, err := e.getLease("default", "names-unknown-kind"); err != nil || len(l.OwnerReferences) != 1 {
		t.Errorf("lease naming an unknown kind: %v; want it untouched", err)
	}

	// The cluster-scoped dependent's Event goes to the default namespace,
	// as client-go puts it.
	e.invalidNamespaceEvent("default", "Namespace", "names-namespaced-owner",
		fmt.Sprintf(`ownerRef [coordination.k8s.io/v1/Lease, namespace: , name: ns-owner, uid: %s] does not exist in namespace ""`, owner.UID))

	// Deleting the namespaced owner in the foreground is not blocked by the
	// cluster-scoped object's invalid reference.
	if err := e.c.CoordinationV1().Leases("default").Delete(ctx, "ns-owner", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	e.eventually(5*time.Second, "namespaced owner gone", e.leaseGone("default", "ns-owner"))
}

func TestNewValidates(t *testing.T) {
	offline := &rest.Config{Host: "https://127.0.0.1:1"}
	if _, err := New(Config{}); err == nil {
		t.Error("New without REST succeeded")
	}
	if _, err := New(Config{REST: offline, Workers: -1}); err == nil {
		t.Error("New with negative Workers succeeded")
	}
	gc, err := New(Config{REST: offline, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := gc.Run(ctx); err != nil {
		t.Errorf("Run with an ended context: %v", err)
	}
	if err := gc.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}
}

// TestWatched: the collector watches every stored resource but Events, as
// Kubernetes' does, and still resolves owners of every kind.
func TestWatched(t *testing.T) {
	gc, err := New(Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	var watched []string
	for _, r := range gc.watched {
		watched = append(watched, r.GroupResource().String())
	}
	for _, want := range []string{"leases.coordination.k8s.io", "nodes", "namespaces"} {
		if !slices.Contains(watched, want) {
			t.Errorf("watched %v, want %s among them", watched, want)
		}
	}
	if slices.Contains(watched, "events") || slices.Contains(watched, "events.events.k8s.io") {
		t.Errorf("watched %v, want no events", watched)
	}
	if _, ok := gc.byKind[corev1.SchemeGroupVersion.WithKind("Event")]; !ok {
		t.Error("the Event kind should still resolve as an owner kind")
	}
}

func TestCollectors(t *testing.T) {
	gc, err := New(Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	for _, c := range gc.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	gc.graph.observe(registry.Leases, objMeta("default", "l", "l-uid", ownedBy("Node", "n", "n-uid", false)))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		m := f.GetMetric()[0]
		got[f.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	want := map[string]float64{
		"leasehold_garbage_collector_deletions_total":  0,
		"leasehold_garbage_collector_orphanings_total": 0,
		"leasehold_garbage_collector_graph_nodes":      2,
	}
	if !maps.Equal(got, want) {
		t.Errorf("metrics %v, want %v", got, want)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}
