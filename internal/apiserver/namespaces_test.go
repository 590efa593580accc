package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	watchtools "k8s.io/client-go/tools/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestSystemNamespaces: default, kube-system and kube-public may not be
// deleted (403, as Kubernetes' NamespaceLifecycle admission answers);
// kube-node-lease may, and KeepNamespaces makes it again at its next
// round.
func TestSystemNamespaces(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := apiservertest.Start(t, apiservertest.Options{Clock: clk})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(s.Config)
	for _, name := range []string{"default", "kube-system", "kube-public"} {
		for _, dryRun := range [][]string{nil, {metav1.DryRunAll}} {
			err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{DryRun: dryRun})
			if !apierrors.IsForbidden(err) || err.Error() != `namespaces "`+name+`" is forbidden: this namespace may not be deleted` {
				t.Errorf("delete namespace %s (dry run %v): %v; want 403, this namespace may not be deleted", name, dryRun, err)
			}
		}
		if ns, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err != nil || ns.DeletionTimestamp != nil {
			t.Errorf("namespace %s after the refused delete: %v, %v", name, ns.DeletionTimestamp, err)
		}
	}

	old, err := cs.CoreV1().Namespaces().Get(ctx, corev1.NamespaceNodeLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.API.KeepNamespaces(ctx) // its ticker exists when it returns
	byName := fields.OneTermEqualSelector("metadata.name", corev1.NamespaceNodeLease).String()
	w, err := cs.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: old.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, corev1.NamespaceNodeLease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The namespace controller empties and removes it.
	if _, err := watchtools.UntilWithoutRetry(ctx, w, func(ev watch.Event) (bool, error) { return ev.Type == watch.Deleted, nil }); err != nil {
		t.Fatalf("waiting for kube-node-lease to go: %v", err)
	}
	w, err = cs.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{FieldSelector: byName})
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(apiserver.NamespacesInterval)
	ev, err := watchtools.UntilWithoutRetry(ctx, w, func(ev watch.Event) (bool, error) { return ev.Type == watch.Added, nil })
	if err != nil {
		t.Fatalf("waiting for kube-node-lease to be made again: %v", err)
	}
	if ns := ev.Object.(*corev1.Namespace); ns.UID == old.UID || ns.Status.Phase != corev1.NamespaceActive {
		t.Errorf("kube-node-lease again: uid %s (was %s), phase %s", ns.UID, old.UID, ns.Status.Phase)
	}
}

// TestGenerateNameCut: a generateName too long to take its five random
// characters is cut first, as kube-apiserver cuts it, so the name made is
// a valid one.
func TestGenerateNameCut(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	base := strings.Repeat("g", 62) + "-"
	ns, err := s.Client(t, "").CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: base}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ns.Name) != 63 || !strings.HasPrefix(ns.Name, base[:58]) {
		t.Errorf("generated %q (%d characters), want %q and five more", ns.Name, len(ns.Name), base[:58])
	}
}
