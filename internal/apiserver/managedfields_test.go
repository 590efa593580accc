package apiserver

import (
	"bytes"
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

// TestHeartbeatManagedFields checks that wherever the fast path applies it
// gives the managed fields the full field manager computes (timestamps
// aside), and that it declines everything else.
func TestHeartbeatManagedFields(t *testing.T) {
	fm, err := managedfields.NewDefaultFieldManager(applyconfigurations.NewTypeConverter(registry.Scheme),
		registry.Scheme, registry.Scheme, registry.Scheme, registry.Leases.GroupVersionKind(), registry.Leases.GroupVersion, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := &Server{clock: clk}
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
		{"renewal by another manager", "other", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, false},
		{"owner sets a field it does not own yet", "agent", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](1) }, false},
		{"owner unsets a field", "agent", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }, false},
		{"label change", "agent", func(l *coordinationv1.Lease) { l.Labels = map[string]string{"team": "b"} }, false},
		{"field owned by someone else", "kubectl", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, false},
		{"unnamed manager owning nothing", "", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proposed := base.DeepCopy()
			tt.change(proposed)
			checkHeartbeat(t, s, req, fm, base, proposed, tt.manager, tt.fast)
		})
	}
}

// checkHeartbeat runs the fast path for an update of cur to proposed. It
// must be taken as want says; taken, it must give the managed fields fm
// computes (timestamps aside) and report a change exactly when proposed
// differs from cur, and declined, leave the object as it was.
func checkHeartbeat(t *testing.T, s *Server, req *request, fm *managedfields.FieldManager, cur, proposed runtime.Object, manager string, want bool) {
	t.Helper()
	fast := proposed.DeepCopyObject()
	got, changed := s.heartbeatManagedFields(req, fast, cur, manager)
	if got != want {
		t.Fatalf("fast path taken: got %v, want %v", got, want)
	}
	if differs := !equality.Semantic.DeepEqual(cur, proposed); got && changed != differs {
		t.Fatalf("fast path reports changed %v for an update that changes something: %v", changed, differs)
	}
	if !got {
		if !equality.Semantic.DeepEqual(fast, proposed) {
			t.Fatalf("declined, but changed the object")
		}
		return
	}
	full := fm.UpdateNoErrors(cur, proposed.DeepCopyObject(), manager)
	if w, g := withoutTimes(objectMeta(full).ManagedFields), withoutTimes(objectMeta(fast).ManagedFields); !equality.Semantic.DeepEqual(w, g) {
		t.Fatalf("managedFields differ:\n fast %+v\n full %+v", g, w)
	}
}

func withoutTimes(entries []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	out := make([]metav1.ManagedFieldsEntry, len(entries))
	for i, e := range entries {
		e.Time = nil
		out[i] = e
	}
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
}

// FuzzFieldsHas checks fieldsHas against structured-merge-diff: on every
// document fieldpath.Set.FromJSON accepts, it answers as the parsed set.
func FuzzFieldsHas(f *testing.F) {
	f.Add([]byte(`{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"0f5c\"}":{}}},"f:spec":{"f:renewTime":{}}}`), "spec", "renewTime")
	f.Add([]byte(`{"f:spec":{".":{},"f:renewTime":{"f:x":{}}}}`), "spec", "")
	f.Add([]byte(`{"f:a":{"i:1":{}},"v:2":{},"f:b":{"f:c":{}}}`), "b", "c")
	f.Add([]byte(`{"f:b":{"0:":{}},"f:b":{"f:c":{}}}`), "b", "c")
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

// TestNodeStatusHeartbeat checks the fast path on an agent's periodic node
// status post: where it applies it gives the status field manager's
// managed fields (timestamps aside), and it declines everything else.
func TestNodeStatusHeartbeat(t *testing.T) {
	fieldManager := func(sub string) *managedfields.FieldManager {
		fm, err := managedfields.NewDefaultFieldManager(applyconfigurations.NewTypeConverter(registry.Scheme),
			registry.Scheme, registry.Scheme, registry.Scheme, registry.Nodes.GroupVersionKind(), registry.Nodes.GroupVersion, sub, nil)
		if err != nil {
			t.Fatal(err)
		}
		return fm
	}
	main, status := fieldManager(""), fieldManager("status")
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := &Server{clock: clk}
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
	// The first post moves the heartbeats to the agent's status entry.
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
		{"status post by another manager", "status", "other", func(n *corev1.Node) { beat(n, 6*time.Minute) }, false},
		// (The server keeps the stored status on such a write; this checks
		// the bookkeeping only.)
		{"heartbeat through the main resource, owned there", "", "agent", func(n *corev1.Node) { beat(n, 6*time.Minute) }, true},
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
				if strings.HasSuffix(tt.name, "owned there") {
					cur = created // the heartbeats are still the creation's
				}
			}
			proposed := cur.DeepCopy()
			tt.change(proposed)
			checkHeartbeat(t, s, req, fm, cur, proposed, tt.manager, tt.fast)
		})
	}
}
