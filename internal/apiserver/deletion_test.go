package apiserver_test

import (
	"context"
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestDeleteAgain: each delete of an object that finalizers hold works out
// the garbage collector's finalizers anew from its propagation policy, as
// kube-apiserver's store does: a foreground deletion turned into an
// orphaning one swaps foregroundDeletion for orphan, and a background
// delete takes both away, deleting the object when nothing else holds it.
// The object's own finalizers stay.
func TestDeleteAgain(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{GarbageCollection: true})
	ctx := context.Background()
	leases := s.Client(t, "").CoordinationV1().Leases("default")
	del := func(name string, p metav1.DeletionPropagation) {
		t.Helper()
		if err := leases.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &p}); err != nil {
			t.Fatalf("delete %s (%s): %v", name, p, err)
		}
	}
	finalizers := func(name string) []string {
		t.Helper()
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		if l.DeletionTimestamp == nil {
			t.Errorf("%s is not being deleted", name)
		}
		return l.Finalizers
	}
	for _, name := range []string{"plain", "held"} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x")}}
		if name == "held" {
			l.Finalizers = []string{"example.com/hold"}
		}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	del("plain", metav1.DeletePropagationForeground)
	if got := finalizers("plain"); !slices.Equal(got, []string{metav1.FinalizerDeleteDependents}) {
		t.Errorf("after a foreground delete: %q", got)
	}
	del("plain", metav1.DeletePropagationOrphan)
	if got := finalizers("plain"); !slices.Equal(got, []string{metav1.FinalizerOrphanDependents}) {
		t.Errorf("after an orphaning delete: %q, want orphan alone", got)
	}
	// A delete that asks for nothing keeps what the object has.
	if err := leases.Delete(ctx, "plain", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := finalizers("plain"); !slices.Equal(got, []string{metav1.FinalizerOrphanDependents}) {
		t.Errorf("after a delete without a policy: %q, want orphan kept", got)
	}
	del("plain", metav1.DeletePropagationBackground)
	if _, err := leases.Get(ctx, "plain", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after a background delete: %v, want it gone", err)
	}

	del("held", metav1.DeletePropagationForeground)
	if got := finalizers("held"); !slices.Equal(got, []string{"example.com/hold", metav1.FinalizerDeleteDependents}) {
		t.Errorf("held, after a foreground delete: %q", got)
	}
	del("held", metav1.DeletePropagationBackground)
	if got := finalizers("held"); !slices.Equal(got, []string{"example.com/hold"}) {
		t.Errorf("held, after a background delete: %q, want its own finalizer alone", got)
	}
	// Asked not to orphan, the deprecated way, a delete that leaves the
	// object to its finalizers is 202 Accepted.
	code := 0
	err := s.Client(t, "").CoordinationV1().RESTClient().Delete().Namespace("default").Resource("leases").Name("held").
		Body(&metav1.DeleteOptions{OrphanDependents: ptr.To(false)}).Do(ctx).StatusCode(&code).Error()
	if err != nil || code != 202 {
		t.Errorf("a delete with orphanDependents false: %d, %v; want 202", code, err)
	}
}

// TestDeleteTerminatingNamespace: a namespace's first delete marks it
// Terminating, without the grace period other kinds get; while its spec
// finalizers remain, another delete leaves it as it is, as kube-apiserver's
// namespace storage does.
func TestDeleteTerminatingNamespace(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{GarbageCollection: true})
	ctx := context.Background()
	namespaces := s.Client(t, "").CoreV1().Namespaces()
	if _, err := namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "going"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	foreground, orphan := metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan
	if err := namespaces.Delete(ctx, "going", metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
		t.Fatal(err)
	}
	first, err := namespaces.Get(ctx, "going", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status.Phase != corev1.NamespaceTerminating || first.DeletionTimestamp == nil || first.DeletionGracePeriodSeconds != nil ||
		!slices.Equal(first.Finalizers, []string{metav1.FinalizerDeleteDependents}) {
		t.Errorf("after the first delete: phase %s, deletionTimestamp %v, grace %v, finalizers %q", first.Status.Phase, first.DeletionTimestamp, first.DeletionGracePeriodSeconds, first.Finalizers)
	}
	if err := namespaces.Delete(ctx, "going", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	again, err := namespaces.Get(ctx, "going", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != first.ResourceVersion {
		t.Errorf("a second delete changed the terminating namespace: finalizers %q", again.Finalizers)
	}

	// A create into it is refused with the cause controllers look for.
	_, err = s.Client(t, "").CoordinationV1().Leases("going").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		t.Errorf("a create into the terminating namespace: %v, want 403 with the cause %s", err, corev1.NamespaceTerminatingCause)
	}
	// A create of it again says the one there is being deleted.
	_, err = namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "going"}}, metav1.CreateOptions{})
	if want := `object is being deleted: namespaces "going" already exists`; !apierrors.IsAlreadyExists(err) || err.Error() != want {
		t.Errorf("a create of the terminating namespace: %v, want 409 %q", err, want)
	}
}

// TestLastFinalizerRemoved: an update that removes the last finalizer of an
// object being deleted deletes it in the same write, as kube-apiserver's
// store does, by PUT and by patch alike: a watcher sees it DELETED, never
// stored being deleted with no finalizer left (a state nothing would have
// finished, had the server stopped between two writes). The response is
// the object as updated; a dry run deletes nothing.
func TestLastFinalizerRemoved(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	ctx := context.Background()
	leases := s.Client(t, "").CoordinationV1().Leases("default")
	held := func(name string) *coordinationv1.Lease {
		t.Helper()
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{"example.com/hold"}}}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := leases.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil || l.DeletionTimestamp == nil {
			t.Fatalf("%s after its delete: %v, %v; want it held", name, l, err)
		}
		return l
	}
	removeByPatch := []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`)

	dry := held("dry")
	if _, err := leases.Patch(ctx, "dry", types.JSONPatchType, removeByPatch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if l, err := leases.Get(ctx, "dry", metav1.GetOptions{}); err != nil || l.ResourceVersion != dry.ResourceVersion {
		t.Errorf("after a dry-run removal: %v, %v; want it as it was", l, err)
	}

	for _, name := range []string{"put", "patch"} {
		l := held(name)
		w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: l.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		var out *coordinationv1.Lease
		if name == "put" {
			l.Finalizers = nil
			out, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		} else {
			out, err = leases.Patch(ctx, name, types.JSONPatchType, removeByPatch, metav1.PatchOptions{})
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if out.Name != name || out.DeletionTimestamp == nil || len(out.Finalizers) > 0 {
			t.Errorf("%s answered %+v; want the object without its finalizers", name, out.ObjectMeta)
		}
		ev := <-w.ResultChan()
		w.Stop()
		if ev.Type != watch.Deleted {
			t.Errorf("%s: the watch saw %s first, want DELETED alone", name, ev.Type)
		}
		if _, err := leases.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: after the removal: %v, want it gone", name, err)
		}
	}
}
