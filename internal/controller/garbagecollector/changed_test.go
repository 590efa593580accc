package garbagecollector

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
)

// fuzzedMeta makes a Lease's metadata from b: up to two owner references
// whose every field comes from a small set, finalizers, deletion, and a
// resourceVersion and label that observe ignores.
func fuzzedMeta(b []byte) *metav1.PartialObjectMetadata {
	at := func(i int) byte {
		if i < len(b) {
			return b[i]
		}
		return 0
	}
	boolPtr := func(v byte) *bool {
		switch v % 3 {
		case 1:
			return ptr.To(false)
		case 2:
			return ptr.To(true)
		}
		return nil
	}
	m := objMeta("kube-node-lease", "n1", "lease-1")
	m.ResourceVersion = fmt.Sprint(at(0))
	m.Labels = map[string]string{"renewal": fmt.Sprint(at(1))}
	for i := range int(at(2) % 3) {
		f := at(3 + i)
		m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{
			APIVersion:         []string{"v1", "coordination.k8s.io/v1"}[f&1],
			Kind:               []string{"Node", "Lease"}[f>>1&1],
			Name:               []string{"n1", "n2"}[f>>2&1],
			UID:                types.UID([]string{"node-1", "node-2"}[f>>3&1]),
			Controller:         boolPtr(f >> 4),
			BlockOwnerDeletion: boolPtr(at(5 + i)),
		})
	}
	flags := at(7)
	if flags&1 != 0 {
		m.DeletionTimestamp = ptr.To(metav1.Unix(int64(flags), 0))
	}
	for i, f := range []string{metav1.FinalizerDeleteDependents, metav1.FinalizerOrphanDependents, "example.com/keep"} {
		if flags>>(1+i)&1 != 0 {
			m.Finalizers = append(m.Finalizers, f)
		}
	}
	return m
}

// dump renders everything the graph holds, for comparing two graphs.
func dump(g *graph) string {
	var lines []string
	for uid, n := range g.nodes {
		var deps []string
		for d := range n.dependents.all() {
			deps = append(deps, string(d.ref.uid))
		}
		slices.Sort(deps)
		var owners []string
		for _, r := range n.owners {
			owners = append(owners, fmt.Sprintf("%s/%s/%s/%s/%v/%v", r.APIVersion, r.Kind, r.Name, r.UID, ptr.Deref(r.Controller, false), ptr.Deref(r.BlockOwnerDeletion, false)))
		}
		kind := ""
		if n.ref.res != nil {
			kind = n.ref.res.Kind
		}
		lines = append(lines, fmt.Sprintf("%s %s %s/%s virtual=%v deleting=%v foreground=%v orphan=%v owners=%v dependents=%v",
			uid, kind, n.ref.namespace, n.ref.name, n.virtual, n.deleting, n.foreground, n.orphan, owners, deps))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// FuzzChanged: when Changed says a new version of an object changed
// nothing the collector looks at, observing it after the version before
// leaves the graph exactly as it was and queues no deletion, so holding
// the change back (apiserver.OnlyChanges) loses nothing. The only queueing
// it may repeat is that of an object still being orphaned, which the
// collector retries by itself until it is done.
func FuzzChanged(f *testing.F) {
	f.Add([]byte{1, 1, 1, 0, 0, 0, 0, 0}, []byte{2, 2, 1, 0, 0, 0, 0, 0})   // a renewal
	f.Add([]byte{1, 1, 1, 0, 0, 0, 0, 0}, []byte{2, 2, 1, 8, 0, 0, 0, 0})   // another owner
	f.Add([]byte{1, 1, 1, 0, 0, 0, 0, 0}, []byte{2, 2, 1, 0, 0, 2, 0, 0})   // blocks its owner now
	f.Add([]byte{1, 1, 1, 0, 0, 0, 0, 0}, []byte{2, 2, 1, 0, 0, 0, 0, 3})   // foreground deletion
	f.Add([]byte{1, 1, 2, 0, 9, 0, 0, 5}, []byte{2, 2, 2, 0, 9, 0, 0, 5})   // orphaning, renewed
	f.Add([]byte{1, 1, 1, 16, 0, 0, 0, 0}, []byte{1, 1, 1, 32, 0, 0, 0, 0}) // controller false, then true
	f.Fuzz(func(t *testing.T, before, after []byte) {
		prev, obj := fuzzedMeta(before), fuzzedMeta(after)
		var deletes, orphans []types.UID
		g := newGraph(func(u types.UID) { deletes = append(deletes, u) }, func(u types.UID) { orphans = append(orphans, u) })
		// One owner seen, one not; the first waits for its dependents
		// when the second byte is odd.
		owner := objMeta("", "n1", "node-1")
		if len(before) > 1 && before[1]&1 != 0 {
			owner = objMeta("", "n1", "node-1", deleting(metav1.FinalizerDeleteDependents))
		}
		g.observe(registry.Nodes, owner)
		g.observe(registry.Leases, prev)
		was := dump(g)
		deletes, orphans = nil, nil
		g.observe(registry.Leases, obj)
		if Changed(prev, obj) {
			return
		}
		if now := dump(g); now != was {
			t.Fatalf("Changed is false, yet the graph changed:\n%s\n->\n%s", was, now)
		}
		if len(deletes) > 0 {
			t.Fatalf("Changed is false, yet %v were queued for deletion", deletes)
		}
		if len(orphans) > 0 && !slices.Contains(prev.Finalizers, metav1.FinalizerOrphanDependents) {
			t.Fatalf("Changed is false, yet %v were queued for orphaning", orphans)
		}
	})
}

// TestChanged: what a renewal, a status post or a label changes is not a
// change to the collector; owners, finalizers and deletion are.
func TestChanged(t *testing.T) {
	base := func(mods ...func(*metav1.PartialObjectMetadata)) *metav1.PartialObjectMetadata {
		return objMeta("kube-node-lease", "n1", "lease-1", append([]func(*metav1.PartialObjectMetadata){ownedBy("Node", "n1", "node-1", false)}, mods...)...)
	}
	tests := []struct {
		name string
		obj  *metav1.PartialObjectMetadata
		want bool
	}{
		{"renewed", base(func(m *metav1.PartialObjectMetadata) { m.ResourceVersion, m.Labels = "9", map[string]string{"a": "b"} }), false},
		{"owner blocks", base(func(m *metav1.PartialObjectMetadata) { m.OwnerReferences[0].BlockOwnerDeletion = ptr.To(true) }), true},
		{"owner is controller", base(func(m *metav1.PartialObjectMetadata) { m.OwnerReferences[0].Controller = ptr.To(false) }), true},
		{"owner renamed", base(func(m *metav1.PartialObjectMetadata) { m.OwnerReferences[0].Name = "n2" }), true},
		{"owner's kind", base(func(m *metav1.PartialObjectMetadata) { m.OwnerReferences[0].Kind = "Lease" }), true},
		{"owner's apiVersion", base(func(m *metav1.PartialObjectMetadata) { m.OwnerReferences[0].APIVersion = "v2" }), true},
		{"second owner", base(ownedBy("Node", "n2", "node-2", false)), true},
		{"no owner", objMeta("kube-node-lease", "n1", "lease-1"), true},
		{"deleted", base(deleting()), true},
		{"a finalizer", base(func(m *metav1.PartialObjectMetadata) { m.Finalizers = []string{"example.com/x"} }), true},
		{"another uid", objMeta("kube-node-lease", "n1", "lease-2", ownedBy("Node", "n1", "node-1", false)), true},
	}
	for _, tt := range tests {
		if got := Changed(base(), tt.obj); got != tt.want {
			t.Errorf("%s: Changed %v, want %v", tt.name, got, tt.want)
		}
	}
}
