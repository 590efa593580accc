package apiserver

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/leasehold/leasehold/internal/registry"
)

// testFieldManager is the field manager the server builds for res and
// subresource sub.
func testFieldManager(tb testing.TB, res *registry.Resource, sub string) *managedfields.FieldManager {
	tb.Helper()
	fm, err := managedfields.NewDefaultFieldManager(applyconfigurations.NewTypeConverter(registry.Scheme),
		registry.Scheme, registry.Scheme, registry.Scheme, res.GroupVersionKind(), res.GroupVersion, sub, resetFields(res, sub))
	if err != nil {
		tb.Fatal(err)
	}
	return fm
}

// clockedServer is as much of a server as the fast path needs: its clock.
func clockedServer() (*Server, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &Server{clock: clk}, clk
}

// TestHeartbeatManagedFields checks that wherever the fast path applies it
// gives the managed fields the full field manager computes (timestamps
// aside), and that it declines everything else.
func TestHeartbeatManagedFields(t *testing.T) {
	fm := testFieldManager(t, registry.Leases, "")
	s, clk := clockedServer()
	req := &request{res: registry.Leases}
	now := metav1.NewMicroTime(clk.Now())

	// The agent creates the lease; an operator labels it.
	created := fm.UpdateNoErrors(&coordinationv1.Lease{}, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "kube-node-lease", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "Node", Name: "n", UID: "3c1f0a52-9d1e-4a53-8c4b-2f7e0d6b9a10"}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n"), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
	}, "agent").(*coordinationv1.Lease)
	labelled := created.DeepCopy()
	labelled.Labels = map[string]string{"team": "a"}
	base := fm.UpdateNoErrors(created, labelled, "kubectl").(*coordinationv1.Lease)

	later := metav1.NewMicroTime(clk.Now().Add(10 * time.Second))
	tests := []struct {
		name    string
		manager string
		change  func(l *coordinationv1.Lease)
		fast    bool
	}{
		{"renewal by the owner", "agent", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, true},
		{"renewal without managedFields in the body", "agent", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later; l.ManagedFields = nil }, true},
		{"owner changes two owned fields", "agent", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later; l.Spec.HolderIdentity = ptr.To("m") }, true},
		{"nothing changes", "agent", func(*coordinationv1.Lease) {}, true},
		{"renewal by another manager", "other", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, true},
		{"owner sets a field no one owns yet", "agent", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](1) }, true},
		{"owner unsets a field", "agent", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }, false},
		{"label change", "agent", func(l *coordinationv1.Lease) { l.Labels = map[string]string{"team": "b"} }, false},
		{"field owned by a manager that owns others", "kubectl", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, true},
		{"unnamed manager owning nothing", "", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, false},
		{"a field that changes hands and one that does not", "kubectl", func(l *coordinationv1.Lease) {
			l.Spec.RenewTime = &later
			l.Labels = map[string]string{"team": "b"}
		}, false},
		{"a field owned by an Apply entry", "agent", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, false},
	}
	applied := base.DeepCopy()
	applied.ManagedFields = append(applied.ManagedFields, metav1.ManagedFieldsEntry{Manager: "applier", Operation: metav1.ManagedFieldsOperationApply,
		APIVersion: "coordination.k8s.io/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:leaseTransitions":{}}}`)}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := base
			if strings.Contains(tt.name, "Apply entry") {
				cur = applied
				cur.Spec.LeaseTransitions = ptr.To[int32](0)
			}
			proposed := cur.DeepCopy()
			tt.change(proposed)
			if strings.Contains(tt.name, "Apply entry") {
				proposed.Spec.LeaseTransitions = ptr.To[int32](1)
			}
			checkHeartbeat(t, s, req, fm, cur, proposed, tt.manager, tt.fast)
		})
	}
}

// checkHeartbeat is compareHeartbeat that must take the fast path as want
// says.
func checkHeartbeat(t *testing.T, s *Server, req *request, fm *managedfields.FieldManager, cur, proposed runtime.Object, manager string, want bool) {
	t.Helper()
	if got := compareHeartbeat(t, s, req, fm, cur, proposed, manager); got != want {
		t.Fatalf("fast path taken: got %v, want %v", got, want)
	}
}

// compareHeartbeat runs the fast path for an update of cur to proposed and
// reports whether it was taken. Taken, it must give the managed fields fm
// computes (timestamps aside) and report a change exactly when proposed
// differs from cur; declined, it must leave the object as it was.
func compareHeartbeat(t *testing.T, s *Server, req *request, fm *managedfields.FieldManager, cur, proposed runtime.Object, manager string) bool {
	t.Helper()
	fast := proposed.DeepCopyObject()
	got, changed := s.heartbeatManagedFields(req, fast, cur, manager)
	if differs := !equality.Semantic.DeepEqual(cur, proposed); got && changed != differs {
		t.Fatalf("fast path reports changed %v for an update that changes something: %v", changed, differs)
	}
	if !got {
		if !equality.Semantic.DeepEqual(fast, proposed) {
			t.Fatalf("declined, but changed the object")
		}
		return false
	}
	full := fm.UpdateNoErrors(cur, proposed.DeepCopyObject(), manager)
	fastEntries, fullEntries := objectMeta(fast).ManagedFields, objectMeta(full).ManagedFields
	// The field manager stamps its entries with the real time and the fast
	// path with the server's clock, and the order of entries follows their
	// times, so the two are compared in the order of their identities and,
	// each, for the field manager's order given its own times.
	if w, g := withoutTimes(fullEntries), withoutTimes(fastEntries); !equality.Semantic.DeepEqual(w, g) {
		t.Fatalf("managedFields differ:\n fast %+v\n full %+v", g, w)
	}
	for _, entries := range [][]metav1.ManagedFieldsEntry{fastEntries, fullEntries} {
		if !slices.IsSortedFunc(entries, compareManagedFields) {
			t.Fatalf("managedFields out of the field manager's order: %+v", entries)
		}
	}
	if changed {
		for _, e := range fastEntries {
			if e.Manager == manager && e.Subresource == req.info.subresource && e.Operation == metav1.ManagedFieldsOperationUpdate &&
				(e.Time == nil || !e.Time.Time.Equal(s.clock.Now())) {
				t.Fatalf("the manager's entry has time %v, not the server's clock", e.Time)
			}
		}
	}
	return true
}

// withoutTimes returns entries without their times, ordered by identity.
func withoutTimes(entries []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	out := make([]metav1.ManagedFieldsEntry, len(entries))
	for i, e := range entries {
		e.Time = nil
		out[i] = e
	}
	slices.SortFunc(out, compareManagedFields)
	return out
}

// TestFieldsHas checks fieldsHas on documents the field manager writes
// and on the shapes it must refuse.
func TestFieldsHas(t *testing.T) {
	lease := `{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"0f5c\"}":{}}},` +
		`"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`
	tests := []struct {
		doc  string
		path []string
		want bool
	}{
		{lease, []string{"f:spec", "f:renewTime"}, true},
		{lease, []string{"f:spec", "f:acquireTime"}, false},
		{lease, []string{"f:spec"}, false}, // only its fields are members
		{lease, []string{"f:metadata", "f:ownerReferences"}, true},
		{lease, []string{"f:status", "f:renewTime"}, false},
		{`{}`, []string{"f:spec", "f:renewTime"}, false},
		{` { "f:spec" : { "." : { } , "f:renewTime" : { } } } `, []string{"f:spec"}, true},
		{`{"f:spec":{"f:renewTime":{"f:x":{}}}}`, []string{"f:spec", "f:renewTime"}, false},
		{`{"f:spec":{"f:renewTime":{"x:unknown":{}}}}`, []string{"f:spec", "f:renewTime"}, true},
		{`{"f:sp\u0065c":{"f:renewTime":{}}}`, []string{"f:spec", "f:renewTime"}, true},
		{`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:lastHeartbeatTime":{}}}}}`,
			[]string{"f:status", "f:conditions", `k:{"type":"Ready"}`, "f:lastHeartbeatTime"}, true},
	}
	for _, tt := range tests {
		got, err := fieldsHas([]byte(tt.doc), tt.path)
		if err != nil || got != tt.want {
			t.Errorf("fieldsHas(%s, %q) = %v, %v; want %v", tt.doc, tt.path, got, err, tt.want)
		}
	}
	for _, doc := range []string{``, `{`, `{"f:spec"}`, `{"f:spec":{}}x`, `{"f:spec\":{}}`, `{"0:":{} "f:spec":{}}`} {
		if _, err := fieldsHas([]byte(doc), []string{"f:spec", "f:renewTime"}); err == nil {
			t.Errorf("fieldsHas(%.40s) took a malformed document", doc)
		}
	}
	// Documents as the field manager writes them take the scan, not the
	// parse, escaped keys included.
	set := fieldpath.NewSet(
		fieldpath.MakePathOrDie("metadata", "ownerReferences", fieldpath.KeyByFields("uid", `0f5c\"`)),
		fieldpath.MakePathOrDie("spec", "renewTime"))
	raw, err := set.ToJSON()
	if err != nil {
		t.Fatal(err)
	}
	if found, ok := scanFields(raw, []string{"f:spec", "f:renewTime"}); !ok || !found {
		t.Errorf("scanFields(%s) = %v, %v; want true, true", raw, found, ok)
	}
}

// FuzzFieldsHas checks fieldsHas against structured-merge-diff: on every
// document fieldpath.Set.FromJSON accepts, it answers as the parsed set.
func FuzzFieldsHas(f *testing.F) {
	f.Add([]byte(`{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"0f5c\"}":{}}},"f:spec":{"f:renewTime":{}}}`), "spec", "renewTime")
	f.Add([]byte(`{"f:spec":{".":{},"f:renewTime":{"f:x":{}}}}`), "spec", "")
	f.Add([]byte(`{"f:a":{"i:1":{}},"v:2":{},"f:b":{"f:c":{}}}`), "b", "c")
	f.Add([]byte(`{"f:b":{"0:":{}},"f:b":{"f:c":{}}}`), "b", "c")
	f.Add([]byte(`{"f:a\\\"":{"f:b":{}},"f:a":{".":{},"f:b":{"f:c":{}}}}`), `a\"`, "b")
	f.Add([]byte(`{"f:a":null,"f:b":{"f:c":{},"f:\u0063":{"f:d":{}}}}`), "b", "c")
	f.Fuzz(func(t *testing.T, doc []byte, a, b string) {
		var set fieldpath.Set
		if set.FromJSON(bytes.NewReader(doc)) != nil {
			return
		}
		for _, p := range [][]string{{"f:" + a}, {"f:" + a, "f:" + b}} {
			path := make(fieldpath.Path, len(p))
			for i, f := range p {
				name := f[len("f:"):]
				path[i] = fieldpath.PathElement{FieldName: &name}
			}
			if got, err := fieldsHas(doc, p); err != nil || got != set.Has(path) {
				t.Fatalf("fieldsHas(%s, %q) = %v, %v; the parsed set says %v", doc, p, got, err, set.Has(path))
			}
		}
	})
}

// BenchmarkFieldsHas looks up renewTime in the managed fields of a node's
// Lease, once per renewal.
func BenchmarkFieldsHas(b *testing.B) {
	doc := []byte(`{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"00000000-0000-0000-0000-000000000001\"}":{}}},` +
		`"f:spec":{"f:acquireTime":{},"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`)
	path := []string{"f:spec", "f:renewTime"}
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := fieldsHas(doc, path); !ok || err != nil {
			b.Fatalf("fieldsHas = %v, %v; want true", ok, err)
		}
	}
}

// TestNodeStatusHeartbeat checks the fast path on an agent's periodic node
// status post: where it applies it gives the status field manager's
// managed fields (timestamps aside), and it declines everything else.
func TestNodeStatusHeartbeat(t *testing.T) {
	main, status := testFieldManager(t, registry.Nodes, ""), testFieldManager(t, registry.Nodes, "status")
	s, clk := clockedServer()
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(clk.Now().Add(d)) }
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"kubernetes.io/hostname": "n"}},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Ready", LastHeartbeatTime: at(0), LastTransitionTime: at(0)},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: at(0), LastTransitionTime: at(0)},
			},
		},
	}
	created := main.UpdateNoErrors(&corev1.Node{}, node, "agent").(*corev1.Node)
	beat := func(n *corev1.Node, d time.Duration) {
		for i := range n.Status.Conditions {
			n.Status.Conditions[i].LastHeartbeatTime = at(d)
		}
	}
	posted := created.DeepCopy()
	beat(posted, time.Minute)
	// The first post gives the heartbeats, which the creation left to no
	// one, to the agent's status entry.
	base := status.UpdateNoErrors(created, posted, "agent").(*corev1.Node)

	tests := []struct {
		name        string
		subresource string
		manager     string
		change      func(n *corev1.Node)
		fast        bool
	}{
		{"status post by the agent", "status", "agent", func(n *corev1.Node) { beat(n, 6*time.Minute) }, true},
		{"one heartbeat", "status", "agent", func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = at(6 * time.Minute) }, true},
		{"nothing changes", "status", "agent", func(*corev1.Node) {}, true},
		{"first status post, after creating the node with a status", "status", "agent", func(n *corev1.Node) { beat(n, 6*time.Minute) }, true},
		{"status post by another manager", "status", "other", func(n *corev1.Node) { beat(n, 6*time.Minute) }, true},
		// The server keeps the stored status on such a write, and the field
		// manager gives the status to no one: the full path.
		{"heartbeat through the main resource, after the creation", "", "agent", func(n *corev1.Node) { beat(n, 6*time.Minute) }, false},
		{"heartbeat through the main resource, owned by the status", "", "agent", func(n *corev1.Node) { beat(n, 7*time.Minute) }, false},
		{"Ready changes", "status", "agent", func(n *corev1.Node) {
			beat(n, 6*time.Minute)
			n.Status.Conditions[0].Status = corev1.ConditionFalse
		}, false},
		{"capacity changes", "status", "agent", func(n *corev1.Node) {
			beat(n, 6*time.Minute)
			n.Status.Capacity[corev1.ResourceCPU] = resource.MustParse("4")
		}, false},
		{"a condition is added", "status", "agent", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse})
		}, false},
		{"a heartbeat is unset", "status", "agent", func(n *corev1.Node) { n.Status.Conditions[1].LastHeartbeatTime = metav1.Time{} }, false},
		{"label change", "status", "agent", func(n *corev1.Node) { n.Labels = map[string]string{"team": "b"} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &request{res: registry.Nodes, info: requestInfo{subresource: tt.subresource}}
			cur, fm := base, status
			if tt.subresource == "" {
				fm = main
			}
			if strings.HasSuffix(tt.name, "after the creation") || strings.HasPrefix(tt.name, "first") {
				cur = created // the heartbeats are still the creation's
			}
			proposed := cur.DeepCopy()
			tt.change(proposed)
			checkHeartbeat(t, s, req, fm, cur, proposed, tt.manager, tt.fast)
		})
	}
}

// TestHeartbeatManagedFieldsSequences runs random sequences of updates by
// several managers through the field manager and, at each step, checks
// the fast path against it wherever it is taken: renewals and holder
// changes that move fields between entries, entries left owning nothing,
// and labels that add managers up to and past the field manager's limit.
func TestHeartbeatManagedFieldsSequences(t *testing.T) {
	fm := testFieldManager(t, registry.Leases, "")
	s, clk := clockedServer()
	req := &request{res: registry.Leases}
	rng := rand.New(rand.NewPCG(1, 2))
	taken, moved := 0, 0
	for seq := 0; seq < 20; seq++ {
		now := metav1.NewMicroTime(clk.Now())
		cur := fm.UpdateNoErrors(&coordinationv1.Lease{}, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "kube-node-lease"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("m0"), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}, "m0").(*coordinationv1.Lease)
		for step := 0; step < 40; step++ {
			manager := "m" + strconv.Itoa(rng.IntN(12))
			// Entries of random ages, for the order that follows them.
			for i := range cur.ManagedFields {
				cur.ManagedFields[i].Time = &metav1.Time{Time: clk.Now().Add(-time.Duration(rng.IntN(1000)) * time.Second)}
			}
			proposed := cur.DeepCopy()
			later := metav1.NewMicroTime(clk.Now().Add(time.Duration(seq*100+step+1) * time.Second))
			switch rng.IntN(4) {
			case 0, 1:
				proposed.Spec.RenewTime = &later
			case 2:
				proposed.Spec.RenewTime = &later
				proposed.Spec.HolderIdentity = ptr.To(manager)
			case 3:
				if proposed.Labels == nil {
					proposed.Labels = map[string]string{}
				}
				proposed.Labels[manager] = strconv.Itoa(step)
			}
			if compareHeartbeat(t, s, req, fm, cur, proposed, manager) {
				taken++
				if owners := ownersOf(cur, "f:spec", "f:renewTime"); len(owners) == 1 && owners[0] != manager {
					moved++
				}
			}
			cur = fm.UpdateNoErrors(cur, proposed, manager).(*coordinationv1.Lease)
		}
	}
	if taken < 100 || moved < 50 {
		t.Fatalf("the sequences took the fast path %d times, moving fields %d times: too few to test it", taken, moved)
	}
}

// ownersOf names the managers whose entries hold path.
func ownersOf(obj runtime.Object, path ...string) []string {
	var out []string
	for _, e := range objectMeta(obj).ManagedFields {
		if e.FieldsV1 == nil {
			continue
		}
		if ok, err := fieldsHas(e.FieldsV1.Raw, path); err == nil && ok {
			out = append(out, e.Manager)
		}
	}
	return out
}

// BenchmarkFirstStatusPost compares the two ways of computing the managed
// fields of an agent's first status post after it created its Node with a
// status: the field manager, and the fast path that moves the heartbeats
// to the agent's status entry.
func BenchmarkFirstStatusPost(b *testing.B) {
	main, status := testFieldManager(b, registry.Nodes, ""), testFieldManager(b, registry.Nodes, "status")
	s, clk := clockedServer()
	req := &request{res: registry.Nodes, info: requestInfo{subresource: "status"}}
	at := metav1.NewTime(clk.Now())
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"kubernetes.io/hostname": "node-1", "kubernetes.io/os": "linux"}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "node-1"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			NodeInfo:    corev1.NodeSystemInfo{MachineID: "m", SystemUUID: "u", BootID: "b", KernelVersion: "6.1", OSImage: "Debian", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse, Reason: "R", LastHeartbeatTime: at, LastTransitionTime: at})
	}
	created := main.UpdateNoErrors(&corev1.Node{}, node, "agent").(*corev1.Node)
	posted := created.DeepCopy()
	posted.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(clk.Now().Add(time.Minute))
	b.Run("field manager", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			status.UpdateNoErrors(created, posted.DeepCopy(), "agent")
		}
	})
	b.Run("fast path", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ok, _ := s.heartbeatManagedFields(req, posted.DeepCopy(), created, "agent"); !ok {
				b.Fatal("fast path declined")
			}
		}
	})
}
