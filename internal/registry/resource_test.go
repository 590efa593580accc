package registry

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestAPIVersion checks that APIVersion spells GroupVersion, for the
// registered resources and for one that is not.
func TestAPIVersion(t *testing.T) {
	unregistered := &Resource{GroupVersion: schema.GroupVersion{Group: "example.com", Version: "v1alpha1"}, Name: "things"}
	for _, r := range append(All(), unregistered) {
		t.Run(r.GroupVersion.String()+"/"+r.Name, func(t *testing.T) {
			if got, want := r.APIVersion(), r.GroupVersion.String(); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
	var v string
	if got := testing.AllocsPerRun(10, func() { v = Leases.APIVersion() }); got != 0 {
		t.Errorf("Leases.APIVersion allocates %v times (%q), want none", got, v)
	}
}

// TestSameView: two versions of an object look the same to selectors when
// their labels and selectable fields are equal, whatever else changed.
func TestSameView(t *testing.T) {
	lease := func(labels map[string]string, renewed int64) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "kube-node-lease", Labels: labels},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: time.Unix(renewed, 0)}},
		}
	}
	node := func(unschedulable bool) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
	}
	for _, c := range []struct {
		what     string
		r        *Resource
		old, new runtime.Object
		want     bool
	}{
		{"a renewal", Leases, lease(nil, 1), lease(map[string]string{}, 2), true},
		{"equal labels", Leases, lease(map[string]string{"a": "1"}, 1), lease(map[string]string{"a": "1"}, 2), true},
		{"a label changed", Leases, lease(map[string]string{"a": "1"}, 1), lease(map[string]string{"a": "2"}, 1), false},
		{"a label added", Leases, lease(nil, 1), lease(map[string]string{"a": ""}, 1), false},
		{"a status post", Nodes, node(false), node(false), true},
		{"a cordon", Nodes, node(false), node(true), false},
	} {
		if got := c.r.SameView(c.old, c.new); got != c.want {
			t.Errorf("%s: SameView %v, want %v", c.what, got, c.want)
		}
	}
}
