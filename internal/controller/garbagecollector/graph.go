package garbagecollector

import (
	"iter"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
)

// objectRef locates one stored object.
type objectRef struct {
	res       *registry.Resource
	namespace string
	name      string
	uid       types.UID
}

// node is one object in the graph, or a placeholder for an owner that some
// dependent names but that has not been observed (virtual).
type node struct {
	ref        objectRef
	owners     []metav1.OwnerReference
	dependents dependentSet
	virtual    bool
	// deleting: deletionTimestamp is set; foreground and orphan: it also
	// carries the foregroundDeletion or orphan finalizer.
	deleting   bool
	foreground bool
	orphan     bool
}

// ownerRef returns n's reference to the owner with uid, if any.
func (n *node) ownerRef(uid types.UID) (metav1.OwnerReference, bool) {
	for _, o := range n.owners {
		if o.UID == uid {
			return o, true
		}
	}
	return metav1.OwnerReference{}, false
}

// fewDependents is how many dependents an owner keeps without a map: the
// first in the set itself, the others in a slice.
const fewDependents = 8

// dependentSet holds an owner's dependents. Most owners (a Node with its
// Lease) have one, which the set holds itself: a slice of one is a heap
// object of its own (100 000 at 100 000 nodes), and a map of one costs
// about 250 bytes (25 MB). Up to fewDependents the others go in a slice,
// and beyond it all of them in a map.
type dependentSet struct {
	first *node               // nil when the set is empty or in a map
	more  []*node             // the others, while first is set
	many  map[types.UID]*node // once set, holds them all
}

// add adds n, or replaces the dependent with n's uid.
func (s *dependentSet) add(n *node) {
	switch {
	case s.many != nil:
		s.many[n.ref.uid] = n
		return
	case s.first == nil:
		s.first = n
		return
	case s.first.ref.uid == n.ref.uid:
		s.first = n
		return
	}
	for i, d := range s.more {
		if d.ref.uid == n.ref.uid {
			s.more[i] = n
			return
		}
	}
	if 1+len(s.more) < fewDependents {
		s.more = append(s.more, n)
		return
	}
	many := make(map[types.UID]*node, 2+len(s.more))
	for d := range s.all() {
		many[d.ref.uid] = d
	}
	many[n.ref.uid] = n
	s.first, s.more, s.many = nil, nil, many
}

func (s *dependentSet) remove(uid types.UID) {
	switch {
	case s.many != nil:
		delete(s.many, uid)
		return
	case s.first == nil:
		return
	case s.first.ref.uid == uid:
		// The last of the others takes the first's place.
		s.first = nil
		if k := len(s.more); k > 0 {
			s.first, s.more = s.more[k-1], s.more[:k-1]
		}
		if len(s.more) == 0 {
			s.more = nil // let the slice's array go
		}
		return
	}
	for i, d := range s.more {
		if d.ref.uid == uid {
			s.more = slices.Delete(s.more, i, i+1)
			return
		}
	}
}

func (s *dependentSet) len() int {
	switch {
	case s.many != nil:
		return len(s.many)
	case s.first == nil:
		return 0
	}
	return 1 + len(s.more)
}

// all yields every dependent, in no particular order.
func (s *dependentSet) all() iter.Seq[*node] {
	return func(yield func(*node) bool) {
		if s.many != nil {
			for _, d := range s.many {
				if !yield(d) {
					return
				}
			}
			return
		}
		if s.first == nil || !yield(s.first) {
			return
		}
		for _, d := range s.more {
			if !yield(d) {
				return
			}
		}
	}
}

// graph maps every observed object, by uid, to its owners and dependents.
// The feeds' handlers change it through observe and forget; workers read it
// through view. enqueueDelete and enqueueOrphan are called with the lock
// held and must not call back into the graph.
type graph struct {
	mu            sync.RWMutex
	nodes         map[types.UID]*node
	enqueueDelete func(types.UID)
	enqueueOrphan func(types.UID)
	// reportNamespace, when set, is told of a dependent whose reference r
	// names an observed namespaced owner in another namespace (or names
	// one from a cluster-scoped dependent), as Kubernetes' collector
	// reports it with an OwnerRefInvalidNamespace event. It is called with
	// the lock held and must not block or call back into the graph.
	reportNamespace func(dependent objectRef, r metav1.OwnerReference)
}

func newGraph(enqueueDelete, enqueueOrphan func(types.UID)) *graph {
	return &graph{nodes: map[types.UID]*node{}, enqueueDelete: enqueueDelete, enqueueOrphan: enqueueOrphan}
}

// size is the number of nodes, virtual ones included.
func (g *graph) size() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.nodes)
}

// observe records that obj of resource res was added or changed.
func (g *graph) observe(res *registry.Resource, obj metav1.Object) {
	g.mu.Lock()
	defer g.mu.Unlock()
	uid := obj.GetUID()
	ref := objectRef{res: res, namespace: obj.GetNamespace(), name: obj.GetName(), uid: uid}
	// The feeds' objects are never modified (the watch cache's are shared
	// by all its readers, and a remote read's are the graph's alone): the
	// graph keeps their references without a copy.
	owners := obj.GetOwnerReferences()
	n, ok := g.nodes[uid]
	switch {
	case !ok:
		n = &node{ref: ref}
		g.nodes[uid] = n
		n.owners = owners
		g.linkOwners(n, owners)
	case n.virtual:
		// The owner some dependents named has arrived. Dependents whose
		// reference does not match what it really is are checked live.
		n.virtual, n.ref = false, ref
		for d := range n.dependents.all() {
			if r, ok := d.ownerRef(uid); ok && !refMatches(r, d, n) {
				if ref.namespace != "" && d.ref.namespace != ref.namespace {
					g.reportInvalidNamespace(d, r)
				}
				g.enqueueDelete(d.ref.uid)
			}
		}
		n.owners = owners
		g.linkOwners(n, owners)
	default:
		n.ref = ref
		old := n.owners
		n.owners = owners
		var added []metav1.OwnerReference
		for _, o := range owners {
			if _, had := refByUID(old, o.UID); !had {
				added = append(added, o)
				continue
			}
			// A dependent that stops blocking an owner may free it, if it
			// waits for its dependents. The dependent blocks the owner if
			// any of its references to it does (an object may name the
			// same owner twice).
			if blocksOwner(old, o.UID) && !blocksOwner(owners, o.UID) {
				if owner := g.nodes[o.UID]; owner != nil && owner.foreground {
					g.enqueueDelete(owner.ref.uid)
				}
			}
		}
		for _, o := range old {
			if _, still := refByUID(owners, o.UID); !still {
				g.unlinkOwner(n, o.UID)
			}
		}
		g.linkOwners(n, added)
	}

	n.deleting = obj.GetDeletionTimestamp() != nil
	wasForeground := n.foreground
	n.foreground = n.deleting && slices.Contains(obj.GetFinalizers(), metav1.FinalizerDeleteDependents)
	n.orphan = n.deleting && slices.Contains(obj.GetFinalizers(), metav1.FinalizerOrphanDependents)
	if n.orphan {
		g.enqueueOrphan(uid)
	}
	if n.foreground && !wasForeground {
		g.enqueueDelete(uid)
		for d := range n.dependents.all() {
			g.enqueueDelete(d.ref.uid)
		}
	}
}

// forget records that the object with uid is gone: its dependents are
// checked, and owners waiting for it are looked at again.
func (g *graph) forget(uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forgetLocked(uid)
}

// forgetUnlisted forgets every object of resource res that a new list of
// it did not hold (listed is false for its uid): they were deleted while
// res was not being watched.
func (g *graph) forgetUnlisted(res *registry.Resource, listed func(types.UID) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var gone []types.UID
	for uid, n := range g.nodes {
		if n.ref.res == res && !listed(uid) {
			gone = append(gone, uid)
		}
	}
	for _, uid := range gone {
		g.forgetLocked(uid)
	}
}

func (g *graph) forgetLocked(uid types.UID) {
	n, ok := g.nodes[uid]
	if !ok || n.virtual {
		return
	}
	for _, o := range n.owners {
		g.unlinkOwner(n, o.UID)
	}
	delete(g.nodes, uid)
	if n.dependents.len() == 0 {
		return
	}
	// The dependents' references now name an owner that is gone: keep a
	// placeholder so that they stay linked until they drop the reference.
	v := &node{ref: objectRef{uid: uid}, virtual: true, dependents: n.dependents}
	g.nodes[uid] = v
	for d := range n.dependents.all() {
		g.enqueueDelete(d.ref.uid)
	}
}

// linkOwners adds n as a dependent of each of owners, creating placeholders
// for owners not observed. n is checked live when an owner is a placeholder,
// does not match the reference, or waits for its dependents.
func (g *graph) linkOwners(n *node, owners []metav1.OwnerReference) {
	check, reported := false, false
	for _, r := range owners {
		owner, ok := g.nodes[r.UID]
		if !ok {
			owner = &node{ref: objectRef{uid: r.UID}, virtual: true}
			g.nodes[r.UID] = owner
		}
		owner.dependents.add(n)
		if owner.virtual || owner.foreground || !refMatches(r, n, owner) {
			check = true
		}
		// Once per change of n's references, as Kubernetes reports it.
		if !reported && !owner.virtual && owner.ref.namespace != "" && owner.ref.namespace != n.ref.namespace {
			g.reportInvalidNamespace(n, r)
			reported = true
		}
	}
	if check {
		g.enqueueDelete(n.ref.uid)
	}
}

func (g *graph) reportInvalidNamespace(d *node, r metav1.OwnerReference) {
	if g.reportNamespace != nil {
		g.reportNamespace(d.ref, r)
	}
}

// unlinkOwner removes n from the dependents of the owner with uid. An owner
// waiting for its dependents is looked at again; a placeholder left without
// dependents goes.
func (g *graph) unlinkOwner(n *node, uid types.UID) {
	owner, ok := g.nodes[uid]
	if !ok {
		return
	}
	owner.dependents.remove(n.ref.uid)
	switch {
	case owner.virtual && owner.dependents.len() == 0:
		delete(g.nodes, uid)
	case owner.foreground:
		g.enqueueDelete(uid)
	}
}

// view is what a worker needs to know about one node.
type view struct {
	ref        objectRef
	virtual    bool
	deleting   bool
	foreground bool
	orphan     bool
	// dependents lists the dependents; blocking those whose reference
	// has blockOwnerDeletion set and really names this owner; busy the
	// dependents that themselves wait for their dependents.
	dependents []objectRef
	blocking   []objectRef
	busy       []objectRef
	// ownersSolid: the object has owners, and the graph has observed each
	// of them, as its reference names it, and not being deleted.
	ownersSolid bool
}

// view returns a copy of what the graph knows about uid.
func (g *graph) view(uid types.UID) (view, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n, ok := g.nodes[uid]
	if !ok {
		return view{}, false
	}
	v := view{ref: n.ref, virtual: n.virtual, deleting: n.deleting, foreground: n.foreground, orphan: n.orphan}
	v.ownersSolid = len(n.owners) > 0
	for _, r := range n.owners {
		owner := g.nodes[r.UID]
		if owner == nil || !refMatches(r, n, owner) || owner.deleting {
			v.ownersSolid = false
			break
		}
	}
	for d := range n.dependents.all() {
		v.dependents = append(v.dependents, d.ref)
		if r, ok := d.ownerRef(uid); ok && blocks(r) && !n.virtual && refMatches(r, d, n) {
			v.blocking = append(v.blocking, d.ref)
		}
		if d.foreground {
			v.busy = append(v.busy, d.ref)
		}
	}
	return v, true
}

// Changed reports whether obj differs from prev, an earlier version of the
// same object, in anything observe reads: its uid, owner references,
// finalizers, and whether it is being deleted. A change for which it is
// false (a Lease's renewal, a Node's status post) leaves the graph as it
// was, so the collector's in-process reads hold it back
// (apiserver.OnlyChanges) and the collector does not wake for it.
func Changed(prev, obj runtime.Object) bool {
	p, err := meta.Accessor(prev)
	if err != nil {
		return true
	}
	o, err := meta.Accessor(obj)
	if err != nil {
		return true
	}
	return p.GetUID() != o.GetUID() ||
		(p.GetDeletionTimestamp() == nil) != (o.GetDeletionTimestamp() == nil) ||
		!slices.Equal(p.GetFinalizers(), o.GetFinalizers()) ||
		!slices.EqualFunc(p.GetOwnerReferences(), o.GetOwnerReferences(), sameRef)
}

// sameRef compares every field of two owner references.
func sameRef(a, b metav1.OwnerReference) bool {
	return a.UID == b.UID && a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name &&
		ptr.Equal(a.Controller, b.Controller) && ptr.Equal(a.BlockOwnerDeletion, b.BlockOwnerDeletion)
}

func refByUID(refs []metav1.OwnerReference, uid types.UID) (metav1.OwnerReference, bool) {
	for _, r := range refs {
		if r.UID == uid {
			return r, true
		}
	}
	return metav1.OwnerReference{}, false
}

func blocks(r metav1.OwnerReference) bool {
	return r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion
}

// blocksOwner says whether any of refs to the owner with uid blocks it.
func blocksOwner(refs []metav1.OwnerReference, uid types.UID) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == uid && blocks(r) })
}

// refMatches says whether the reference r that dependent d holds really
// names owner: same kind and name, and for a namespaced owner the
// dependent's namespace (Kubernetes treats an owner in another namespace,
// or a namespaced owner of a cluster-scoped object, as not found).
func refMatches(r metav1.OwnerReference, d, owner *node) bool {
	if owner.virtual || owner.ref.res == nil {
		return false
	}
	if r.Kind != owner.ref.res.Kind || r.Name != owner.ref.name {
		return false
	}
	return !owner.ref.res.Namespaced || owner.ref.namespace == d.ref.namespace
}
