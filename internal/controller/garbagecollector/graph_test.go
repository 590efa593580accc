package garbagecollector

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
)

// step is one feed notification: an object observed, or a uid gone.
type step struct {
	res  *registry.Resource
	obj  *metav1.PartialObjectMetadata
	gone types.UID
}

type recorder struct{ deletes, orphans []types.UID }

func objMeta(ns, name, uid string, mods ...func(*metav1.PartialObjectMetadata)) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
	for _, f := range mods {
		f(m)
	}
	return m
}

func ownedBy(kind, name, uid string, block bool) func(*metav1.PartialObjectMetadata) {
	return func(m *metav1.PartialObjectMetadata) {
		apiVersion := "v1"
		if kind == "Lease" {
			apiVersion = "coordination.k8s.io/v1"
		}
		r := metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid)}
		if block {
			r.BlockOwnerDeletion = ptr.To(true)
		}
		m.OwnerReferences = append(m.OwnerReferences, r)
	}
}

func deleting(finalizers ...string) func(*metav1.PartialObjectMetadata) {
	return func(m *metav1.PartialObjectMetadata) {
		now := metav1.NewTime(time.Unix(0, 0))
		m.DeletionTimestamp = &now
		m.Finalizers = finalizers
	}
}

func uids(s ...string) []types.UID {
	var out []types.UID
	for _, u := range s {
		out = append(out, types.UID(u))
	}
	return out
}

func TestGraph(t *testing.T) {
	node := objMeta("", "n1", "node-1")
	lease := func(mods ...func(*metav1.PartialObjectMetadata)) *metav1.PartialObjectMetadata {
		return objMeta("kube-node-lease", "n1", "lease-1", mods...)
	}
	tests := []struct {
		name string
		// setup is applied first; its enqueues are not checked.
		setup []step
		steps []step
		// wantDeletes and wantOrphans are the uids queued by steps, sorted.
		wantDeletes []types.UID
		wantOrphans []types.UID
		wantSize    int
	}{{
		name:        "dependent of an unseen owner is checked",
		steps:       []step{{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", false))}},
		wantDeletes: uids("lease-1"),
		wantSize:    2,
	}, {
		name:     "dependent of a seen owner is left alone",
		setup:    []step{{res: registry.Nodes, obj: node}},
		steps:    []step{{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", false))}},
		wantSize: 2,
	}, {
		name:     "owner arriving after its dependent matches",
		setup:    []step{{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", false))}},
		steps:    []step{{res: registry.Nodes, obj: node}},
		wantSize: 2,
	}, {
		name:        "owner arriving after its dependent under another name",
		setup:       []step{{res: registry.Leases, obj: lease(ownedBy("Node", "n2", "node-1", false))}},
		steps:       []step{{res: registry.Nodes, obj: node}},
		wantDeletes: uids("lease-1"),
		wantSize:    2,
	}, {
		name: "deleting an owner checks its dependents",
		setup: []step{
			{res: registry.Nodes, obj: node},
			{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", false))},
			{res: registry.Leases, obj: objMeta("kube-node-lease", "other", "lease-2", ownedBy("Node", "n1", "node-1", false))},
		},
		steps:       []step{{gone: "node-1"}},
		wantDeletes: uids("lease-1", "lease-2"),
		wantSize:    3, // the placeholder for node-1 stays while dependents name it
	}, {
		name: "placeholder goes with its last dependent",
		setup: []step{
			{res: registry.Nodes, obj: node},
			{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", false))},
			{gone: "node-1"},
		},
		steps:    []step{{gone: "lease-1"}},
		wantSize: 0,
	}, {
		name: "foreground deletion checks the owner and its dependents",
		setup: []step{
			{res: registry.Nodes, obj: node},
			{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", true))},
		},
		steps:       []step{{res: registry.Nodes, obj: objMeta("", "n1", "node-1", deleting(metav1.FinalizerDeleteDependents))}},
		wantDeletes: uids("lease-1", "node-1"),
		wantSize:    2,
	}, {
		name: "a dependent leaving a foreground owner checks the owner",
		setup: []step{
			{res: registry.Nodes, obj: objMeta("", "n1", "node-1", deleting(metav1.FinalizerDeleteDependents))},
			{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", true))},
		},
		steps:       []step{{gone: "lease-1"}},
		wantDeletes: uids("node-1"),
		wantSize:    1,
	}, {
		name: "a dependent dropping its reference to a foreground owner checks the owner",
		setup: []step{
			{res: registry.Nodes, obj: objMeta("", "n1", "node-1", deleting(metav1.FinalizerDeleteDependents))},
			{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", true))},
		},
		steps:       []step{{res: registry.Leases, obj: lease()}},
		wantDeletes: uids("node-1"),
		wantSize:    2,
	}, {
		name: "a dependent unblocking a foreground owner checks the owner",
		setup: []step{
			{res: registry.Nodes, obj: objMeta("", "n1", "node-1", deleting(metav1.FinalizerDeleteDependents))},
			{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", true))},
		},
		steps:       []step{{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", false))}},
		wantDeletes: uids("node-1"),
		wantSize:    2,
	}, {
		name: "a dependent naming a foreground owner twice, seen again unchanged, checks nothing",
		setup: []step{
			{res: registry.Nodes, obj: objMeta("", "n1", "node-1", deleting(metav1.FinalizerDeleteDependents))},
			{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", true), ownedBy("Node", "n1", "node-1", false))},
		},
		steps:    []step{{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", true), ownedBy("Node", "n1", "node-1", false))}},
		wantSize: 2,
	}, {
		name: "a dependent naming a foreground owner twice unblocks it when neither reference blocks",
		setup: []step{
			{res: registry.Nodes, obj: objMeta("", "n1", "node-1", deleting(metav1.FinalizerDeleteDependents))},
			{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", true), ownedBy("Node", "n1", "node-1", false))},
		},
		steps:       []step{{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", false), ownedBy("Node", "n1", "node-1", false))}},
		wantDeletes: uids("node-1"),
		wantSize:    2,
	}, {
		name:        "a new dependent of a foreground owner is checked",
		setup:       []step{{res: registry.Nodes, obj: objMeta("", "n1", "node-1", deleting(metav1.FinalizerDeleteDependents))}},
		steps:       []step{{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", true))}},
		wantDeletes: uids("lease-1"),
		wantSize:    2,
	}, {
		name: "orphan deletion queues the owner for orphaning",
		setup: []step{
			{res: registry.Nodes, obj: node},
			{res: registry.Leases, obj: lease(ownedBy("Node", "n1", "node-1", false))},
		},
		steps:       []step{{res: registry.Nodes, obj: objMeta("", "n1", "node-1", deleting(metav1.FinalizerOrphanDependents))}},
		wantOrphans: uids("node-1"),
		wantSize:    2,
	}, {
		name:        "owner in another namespace does not match",
		setup:       []step{{res: registry.Leases, obj: objMeta("a", "owner", "lease-o")}},
		steps:       []step{{res: registry.Leases, obj: objMeta("b", "dep", "lease-d", ownedBy("Lease", "owner", "lease-o", true))}},
		wantDeletes: uids("lease-d"),
		wantSize:    2,
	}, {
		name:     "background deletion of an object queues nothing for it",
		setup:    []step{{res: registry.Nodes, obj: node}},
		steps:    []step{{gone: "node-1"}},
		wantSize: 0,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			recording := false
			g := newGraph(func(u types.UID) {
				if recording {
					rec.deletes = append(rec.deletes, u)
				}
			}, func(u types.UID) {
				if recording {
					rec.orphans = append(rec.orphans, u)
				}
			})
			apply := func(s step) {
				if s.obj != nil {
					g.observe(s.res, s.obj)
				} else {
					g.forget(s.gone)
				}
			}
			for _, s := range tt.setup {
				apply(s)
			}
			recording = true
			for _, s := range tt.steps {
				apply(s)
			}
			slices.Sort(rec.deletes)
			rec.deletes = slices.Compact(rec.deletes)
			if !slices.Equal(rec.deletes, tt.wantDeletes) {
				t.Errorf("queued for deletion %v, want %v", rec.deletes, tt.wantDeletes)
			}
			if !slices.Equal(rec.orphans, tt.wantOrphans) {
				t.Errorf("queued for orphaning %v, want %v", rec.orphans, tt.wantOrphans)
			}
			if got := g.size(); got != tt.wantSize {
				t.Errorf("graph size %d, want %d", got, tt.wantSize)
			}
		})
	}
}

// TestForgetUnlisted: after a relist of one resource, the objects of that
// resource the list did not hold are forgotten as if deleted (their
// dependents are checked), and nothing else is.
func TestForgetUnlisted(t *testing.T) {
	var deletes []types.UID
	g := newGraph(func(u types.UID) { deletes = append(deletes, u) }, func(types.UID) {})
	g.observe(registry.Nodes, objMeta("", "n1", "node-1"))
	g.observe(registry.Nodes, objMeta("", "n2", "node-2"))
	g.observe(registry.Leases, objMeta("kube-node-lease", "n1", "lease-1", ownedBy("Node", "n1", "node-1", false)))
	g.observe(registry.Leases, objMeta("kube-node-lease", "n2", "lease-2", ownedBy("Node", "n2", "node-2", false)))
	// A placeholder for an owner never seen, named by a lease.
	g.observe(registry.Leases, objMeta("kube-node-lease", "n3", "lease-3", ownedBy("Node", "n3", "node-3", false)))
	deletes = nil

	g.forgetUnlisted(registry.Nodes, func(uid types.UID) bool { return uid == "node-2" })
	if want := uids("lease-1"); !slices.Equal(deletes, want) {
		t.Errorf("queued for deletion %v, want %v", deletes, want)
	}
	if _, ok := g.view("node-2"); !ok {
		t.Error("a listed node was forgotten")
	}
	if v, ok := g.view("node-1"); !ok || !v.virtual {
		t.Errorf("the unlisted node is %+v (in graph %v), want a placeholder for its lease", v, ok)
	}
	if v, ok := g.view("node-3"); !ok || !v.virtual {
		t.Errorf("the placeholder of node-3 is %+v (in graph %v), want it kept", v, ok)
	}
	for _, uid := range uids("lease-1", "lease-2", "lease-3") {
		if _, ok := g.view(uid); !ok {
			t.Errorf("%s, of another resource, was forgotten", uid)
		}
	}
}

func TestGraphView(t *testing.T) {
	g := newGraph(func(types.UID) {}, func(types.UID) {})
	g.observe(registry.Leases, objMeta("a", "owner", "o", deleting(metav1.FinalizerDeleteDependents)))
	g.observe(registry.Leases, objMeta("a", "blocker", "b", ownedBy("Lease", "owner", "o", true)))
	g.observe(registry.Leases, objMeta("a", "free", "f", ownedBy("Lease", "owner", "o", false)))
	g.observe(registry.Leases, objMeta("other", "elsewhere", "e", ownedBy("Lease", "owner", "o", true)))
	g.observe(registry.Leases, objMeta("a", "busy", "x", ownedBy("Lease", "owner", "o", true), deleting(metav1.FinalizerDeleteDependents)))

	v, ok := g.view("o")
	if !ok {
		t.Fatal("owner not in graph")
	}
	if !v.foreground || !v.deleting || v.orphan || v.virtual {
		t.Errorf("view flags %+v, want deleting in the foreground", v)
	}
	names := func(refs []objectRef) []string {
		var out []string
		for _, r := range refs {
			out = append(out, r.name)
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(v.dependents), []string{"blocker", "busy", "elsewhere", "free"}; !slices.Equal(got, want) {
		t.Errorf("dependents %v, want %v", got, want)
	}
	// The reference from another namespace does not name this owner, so it
	// does not block it.
	if got, want := names(v.blocking), []string{"blocker", "busy"}; !slices.Equal(got, want) {
		t.Errorf("blocking %v, want %v", got, want)
	}
	if got, want := names(v.busy), []string{"busy"}; !slices.Equal(got, want) {
		t.Errorf("busy %v, want %v", got, want)
	}
	if _, ok := g.view("missing"); ok {
		t.Error("view of a uid never seen succeeded")
	}
}

// TestGraphViewOwnersSolid: a dependent's owners are solid once each is
// observed as its reference names it and none is being deleted.
func TestGraphViewOwnersSolid(t *testing.T) {
	g := newGraph(func(types.UID) {}, func(types.UID) {})
	solid := func(uid types.UID) bool {
		t.Helper()
		v, ok := g.view(uid)
		if !ok {
			t.Fatalf("%s not in graph", uid)
		}
		return v.ownersSolid
	}
	g.observe(registry.Leases, objMeta("kube-node-lease", "web-1", "l", ownedBy("Node", "web-1", "n", false)))
	if solid("l") {
		t.Error("owners solid before the owner was observed")
	}
	g.observe(registry.Nodes, objMeta("", "web-1", "n"))
	if !solid("l") {
		t.Error("owners not solid once the Node was observed")
	}
	if solid("n") {
		t.Error("an object without owners has solid owners")
	}
	g.observe(registry.Leases, objMeta("kube-node-lease", "web-2", "m", ownedBy("Node", "other-name", "n", false)))
	if solid("m") {
		t.Error("owners solid though the reference names another node")
	}
	g.observe(registry.Nodes, objMeta("", "web-1", "n", deleting()))
	if solid("l") {
		t.Error("owners solid while the owner is being deleted")
	}
}

func TestAbsentOwners(t *testing.T) {
	a := newAbsentOwners(2)
	k := func(n string) absentKey { return absentKey{name: n, uid: types.UID(n)} }
	a.add(k("a"))
	a.add(k("b"))
	if !a.has(k("a")) || !a.has(k("b")) || a.has(k("c")) {
		t.Fatal("set does not hold what was added")
	}
	a.add(k("c")) // over the bound: starts afresh
	if a.has(k("a")) || !a.has(k("c")) {
		t.Error("set did not start afresh at its bound")
	}
}

// TestDependentSet: the set keeps each uid once, without a map up to
// fewDependents and in a map beyond, and removes from either.
func TestDependentSet(t *testing.T) {
	n := func(uid string) *node { return &node{ref: objectRef{uid: types.UID(uid)}} }
	uids := func(s *dependentSet) []string {
		var out []string
		for d := range s.all() {
			out = append(out, string(d.ref.uid))
		}
		slices.Sort(out)
		return out
	}
	var s dependentSet
	var want []string
	for i := range fewDependents + 3 {
		uid := fmt.Sprintf("d%02d", i)
		s.add(n(uid))
		s.add(n(uid)) // again: replaced, not added twice
		want = append(want, uid)
		if got := uids(&s); !slices.Equal(got, want) || s.len() != len(want) {
			t.Fatalf("after adding %s: %v (len %d), want %v", uid, got, s.len(), want)
		}
		if inMap := s.many != nil; inMap != (len(want) > fewDependents) {
			t.Fatalf("with %d dependents, in a map: %v", len(want), inMap)
		}
	}
	s.remove("d03")
	s.remove("absent")
	want = slices.DeleteFunc(want, func(u string) bool { return u == "d03" })
	if got := uids(&s); !slices.Equal(got, want) {
		t.Errorf("after removals: %v, want %v", got, want)
	}

	var small dependentSet
	small.add(n("a"))
	small.add(n("b"))
	small.add(n("c"))
	small.remove("a") // the first: the last of the others takes its place
	if got := uids(&small); !slices.Equal(got, []string{"b", "c"}) || small.many != nil || small.len() != 2 {
		t.Errorf("small set after removing a: %v (len %d, map %v), want [b c] without a map", got, small.len(), small.many != nil)
	}
	small.remove("b")
	small.remove("c")
	if got := uids(&small); len(got) != 0 || small.len() != 0 {
		t.Errorf("emptied set holds %v (len %d)", got, small.len())
	}
	small.add(n("d"))
	if got := uids(&small); !slices.Equal(got, []string{"d"}) || small.first == nil || small.more != nil {
		t.Errorf("one dependent after emptying: %v, not held by the set itself", got)
	}
	for range small.all() {
		break // stopping early is allowed
	}
}

// BenchmarkGraphObserve builds the graph of a fleet: a Node and the Lease
// it owns for each of 10 000 nodes, then a renewal of every Lease (the
// same object observed again). B/op divided by 10 000 is what the graph
// holds and churns per node.
func BenchmarkGraphObserve(b *testing.B) {
	const nodes = 10000
	objs := make([][2]*metav1.PartialObjectMetadata, nodes)
	for i := range objs {
		name := fmt.Sprintf("node-%05d", i)
		objs[i] = [2]*metav1.PartialObjectMetadata{
			objMeta("", name, "n-"+name),
			objMeta("kube-node-lease", name, "l-"+name, ownedBy("Node", name, "n-"+name, false)),
		}
	}
	noop := func(types.UID) {}
	b.ReportAllocs()
	for b.Loop() {
		g := newGraph(noop, noop)
		for _, o := range objs {
			g.observe(registry.Nodes, o[0])
			g.observe(registry.Leases, o[1])
		}
		for _, o := range objs {
			g.observe(registry.Leases, o[1])
		}
		if g.size() != 2*nodes {
			b.Fatalf("graph of %d, want %d", g.size(), 2*nodes)
		}
	}
}

// TestGraphReportsInvalidNamespace: a dependent naming a namespaced owner
// seen in another namespace is reported once per change of its references,
// whichever of the two the graph sees first; one naming a cluster-scoped
// owner, or an owner in its own namespace, is not.
func TestGraphReportsInvalidNamespace(t *testing.T) {
	var reports []string
	g := newGraph(func(types.UID) {}, func(types.UID) {})
	g.reportNamespace = func(d objectRef, r metav1.OwnerReference) {
		reports = append(reports, fmt.Sprintf("%s/%s->%s", d.namespace, d.name, r.Name))
	}
	g.observe(registry.Leases, objMeta("a", "owner", "o"))
	g.observe(registry.Nodes, objMeta("", "n1", "node-1"))
	g.observe(registry.Leases, objMeta("a", "same", "d0", ownedBy("Lease", "owner", "o", false), ownedBy("Node", "n1", "node-1", false)))
	g.observe(registry.Leases, objMeta("b", "after", "d1", ownedBy("Lease", "owner", "o", false), ownedBy("Lease", "owner", "o", false)))
	g.observe(registry.Leases, objMeta("b", "after", "d1", ownedBy("Lease", "owner", "o", false))) // a change of nothing it adds
	g.observe(registry.Leases, objMeta("c", "before", "d2", ownedBy("Lease", "late", "o2", false)))
	g.observe(registry.Leases, objMeta("a", "late", "o2"))
	g.observe(registry.Namespaces, objMeta("", "cluster-scoped", "d3", ownedBy("Lease", "owner", "o", false)))
	want := []string{"b/after->owner", "c/before->late", "/cluster-scoped->owner"}
	if !slices.Equal(reports, want) {
		t.Errorf("reported %q, want %q", reports, want)
	}
}
