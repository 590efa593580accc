package apiserver_test

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestRequestsForOneName: a watch on an object's path, and a list or watch
// whose field selector names one object, are requests for that object, as
// in kube-apiserver: they deliver it alone, and RBAC's resourceNames
// decide them. A watch on an object's path delivered its whole collection
// before, whatever RBAC allowed.
func TestRequestsForOneName(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers()})
	ctx := context.Background()
	admin := s.Client(t, "")
	const ns = "named"
	createNamespace(t, admin, ns)
	for _, name := range []string{"l1", "l2", "l3"} {
		if _, err := admin.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grantAlice(t, admin, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "l3-reader", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"coordination.k8s.io"},
			Resources: []string{"leases"}, ResourceNames: []string{"l3"}}}})
	alice := clientFor(t, s, aliceToken)
	leases := alice.CoordinationV1().Leases(ns)
	eventuallyAuth(t, "alice reads l3 after the binding", func() error {
		_, err := leases.Get(ctx, "l3", metav1.GetOptions{})
		return err
	})

	one := metav1.ListOptions{FieldSelector: "metadata.name=l3"}
	list, err := leases.List(ctx, one)
	if err != nil {
		t.Fatalf("list of l3 by field selector: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "l3" {
		t.Errorf("list of l3 by field selector: %d items", len(list.Items))
	}
	if _, err := leases.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list of every lease: got %v, want Forbidden", err)
	}
	if _, err := leases.Watch(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("watch of every lease: got %v, want Forbidden", err)
	}
	if _, err := alice.CoordinationV1().RESTClient().Get().AbsPath("/apis/coordination.k8s.io/v1/watch/namespaces", ns, "leases/l1").Watch(ctx); !apierrors.IsForbidden(err) {
		t.Errorf("watch on l1's path: got %v, want Forbidden", err)
	}

	bySelector, err := leases.Watch(ctx, one)
	if err != nil {
		t.Fatalf("watch of l3 by field selector: %v", err)
	}
	defer bySelector.Stop()
	onPath, err := alice.CoordinationV1().RESTClient().Get().AbsPath("/apis/coordination.k8s.io/v1/watch/namespaces", ns, "leases/l3").Watch(ctx)
	if err != nil {
		t.Fatalf("watch on l3's path: %v", err)
	}
	defer onPath.Stop()
	for _, name := range []string{"l1", "l3"} {
		if _, err := admin.CoordinationV1().Leases(ns).Patch(ctx, name, types.MergePatchType,
			[]byte(`{"spec":{"holderIdentity":"h"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	expectEvents(t, "watch of l3 by field selector", bySelector, []string{"ADDED l3", "MODIFIED l3"})
	expectEvents(t, "watch on l3's path", onPath, []string{"ADDED l3", "MODIFIED l3"})

	// ?watch on an object's path is a get of it, as in kube-apiserver.
	var got coordinationv1.Lease
	if err := alice.CoordinationV1().RESTClient().Get().AbsPath("/apis/coordination.k8s.io/v1/namespaces", ns, "leases/l3").
		Param("watch", "true").Do(ctx).Into(&got); err != nil || got.Name != "l3" {
		t.Errorf("get of l3 with ?watch=true: %v, %q", err, got.Name)
	}

	// A field selector must agree with the name on the path.
	err = admin.CoordinationV1().RESTClient().Get().AbsPath("/apis/coordination.k8s.io/v1/watch/namespaces", ns, "leases/l3").
		Param("fieldSelector", "metadata.name=l1").Do(ctx).Error()
	if !apierrors.IsBadRequest(err) || err.Error() != "fieldSelector metadata.name doesn't match requested name" {
		t.Errorf("watch on l3's path of l1: got %v, want BadRequest", err)
	}
	// A watch on an object's path needs its namespace.
	err = admin.CoordinationV1().RESTClient().Get().AbsPath("/apis/coordination.k8s.io/v1/watch/leases/l3").Do(ctx).Error()
	if !apierrors.IsNotFound(err) {
		t.Errorf("watch on a path of l3 without its namespace: got %v, want NotFound", err)
	}
	watchOptionsAsKube(t, admin, ns)
}

// watchOptionsAsKube: watches that kube-apiserver serves, and leasehold
// did not, or not as it does.
func watchOptionsAsKube(t *testing.T, admin kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	leases := admin.CoordinationV1().Leases(ns)
	// From resourceVersion 0 with no initial events: from now. It replayed
	// the kind's history from etcd before.
	now, err := leases.Watch(ctx, metav1.ListOptions{
		ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, SendInitialEvents: ptr.To(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer now.Stop()
	// The initial events without bookmarks: they come, without the
	// bookmark that would end them. It was refused with a 422 before.
	initial, err := leases.Watch(ctx, metav1.ListOptions{
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, SendInitialEvents: ptr.To(true),
	})
	if err != nil {
		t.Fatalf("initial events without bookmarks: %v", err)
	}
	defer initial.Stop()
	// A watch from "" (or "0") is a watch-list, as with kube-apiserver's
	// WatchList on (its default since 1.34): with bookmarks asked for, the
	// bookmark that ends the initial events follows them.
	legacy, err := leases.Watch(ctx, metav1.ListOptions{AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer legacy.Stop()
	for _, want := range []string{"ADDED l1", "ADDED l2", "ADDED l3", "BOOKMARK "} {
		ev := nextEvent(t, legacy)
		l, _ := ev.Object.(*coordinationv1.Lease)
		if got := string(ev.Type) + " " + l.GetName(); got != want {
			t.Fatalf("watch from \"\" with bookmarks: %s, want %s", got, want)
		}
		if ev.Type == watch.Bookmark && l.Annotations["k8s.io/initial-events-end"] != "true" {
			t.Errorf("the bookmark after the initial events: annotations %v", l.Annotations)
		}
	}
	if _, err := leases.Patch(ctx, "l2", types.MergePatchType, []byte(`{"spec":{"holderIdentity":"now"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, "watch from now", now, []string{"MODIFIED l2"})
	for _, want := range []string{"ADDED l1", "ADDED l2", "ADDED l3", "MODIFIED l2"} {
		ev := nextEvent(t, initial)
		l, _ := ev.Object.(*coordinationv1.Lease)
		if got := string(ev.Type) + " " + l.GetName(); got != want {
			t.Fatalf("initial events without bookmarks: %s, want %s", got, want)
		}
	}
}

// grantAlice creates role and binds alice to it in its namespace.
func grantAlice(t *testing.T, admin kubernetes.Interface, role *rbacv1.Role) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.RbacV1().Roles(role.Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(role.Namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-" + role.Name},
		RoleRef:    rbacv1.RoleRef{Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
