package apiserver_test

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestCreateOnUpdate: a PUT of a missing Lease, LeaseCandidate, Event or
// RBAC object creates it (201), as kube-apiserver's strategies for those
// kinds allow (kubectl replace of an object not there yet), if the user
// may create it as well as update it; a Node is not created so.
func TestCreateOnUpdate(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers()})
	ctx := context.Background()
	admin := s.Client(t, "")
	const ns = "put"
	createNamespace(t, admin, ns)

	var code int
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: ns}}
	err := admin.CoordinationV1().RESTClient().Put().Namespace(ns).Resource("leases").Name("new").Body(lease).Do(ctx).StatusCode(&code).Error()
	if err != nil || code != 201 {
		t.Errorf("PUT of a missing lease: %v, code %d, want 201", err, code)
	}
	if _, err := admin.CoordinationV1().Leases(ns).Get(ctx, "new", metav1.GetOptions{}); err != nil {
		t.Errorf("the lease PUT created: %v", err)
	}
	if _, err := admin.RbacV1().ClusterRoles().Update(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "put-new"}}, metav1.UpdateOptions{}); err != nil {
		t.Errorf("PUT of a missing ClusterRole: %v", err)
	}
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "put-new", Namespace: ns}, EventTime: metav1.NowMicro(),
		ReportingController: "example.com/c", ReportingInstance: "i", Action: "Tested", Reason: "Tested", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{Kind: "Lease", Namespace: ns, Name: "new"}}
	if _, err := admin.EventsV1().Events(ns).Update(ctx, ev, metav1.UpdateOptions{}); err != nil {
		t.Errorf("PUT of a missing events.k8s.io Event: %v", err)
	}
	if _, err := admin.CoreV1().Nodes().Update(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "put-new"}}, metav1.UpdateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("PUT of a missing Node: got %v, want NotFound", err)
	}

	// Who may update leases, and not create them, may not create one by
	// PUT; once allowed to create, it may.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "lease-updater", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "update"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}}}}
	grantAlice(t, admin, role)
	alice := clientFor(t, s, aliceToken).CoordinationV1().Leases(ns)
	eventuallyAuth(t, "alice reads after the binding", func() error {
		_, err := alice.Get(ctx, "new", metav1.GetOptions{})
		return err
	})
	_, err = alice.Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "alices"}}, metav1.UpdateOptions{})
	want := `leases.coordination.k8s.io "alices" is forbidden: User "alice" cannot create resource "leases" in API group "coordination.k8s.io" in the namespace "put"`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("PUT of a missing lease without create: got %v\nwant %s", err, want)
	}
	if _, err := admin.CoordinationV1().Leases(ns).Get(ctx, "alices", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused PUT stored a lease: %v", err)
	}
	role.Rules[0].Verbs = append(role.Rules[0].Verbs, "create")
	if _, err := admin.RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyAuth(t, "alice creates by PUT once allowed to create", func() error {
		_, err := alice.Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "alices"}}, metav1.UpdateOptions{})
		return err
	})
}
